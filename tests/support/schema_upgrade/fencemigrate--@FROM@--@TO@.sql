-- A synthetic upgrade of the PostgreSQL fence schema from @FROM@ to @TO@ (tests/test_schema_upgrade.py
-- fills in the versions): one harmless new table, and the new version. It keeps the mechanism that
-- will apply the upgrade scripts after 1.0 tested while there are none.
\echo Use "ALTER EXTENSION fencemigrate UPDATE" to load this file. \quit

CREATE TABLE @extschema@.upgrade_probe (id integer PRIMARY KEY);

CREATE OR REPLACE FUNCTION @extschema@.schema_version() RETURNS text
LANGUAGE sql IMMUTABLE
AS $$ SELECT '@TO@'::text $$;
