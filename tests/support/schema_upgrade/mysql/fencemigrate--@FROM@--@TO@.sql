-- A synthetic upgrade of the MySQL fence schema from @FROM@ to @TO@ (tests/test_schema_upgrade.py
-- fills in the versions): one harmless new table, and the new version.

CREATE TABLE @extschema@_upgrade_probe (id INT PRIMARY KEY);

UPDATE @extschema@_schema_version SET version = '@TO@';
