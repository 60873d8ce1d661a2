-- fencemigrate 0.3 -> 0.4 on MySQL and MariaDB: a hardened fence (issue 12).
--
-- The runner applies this file one statement at a time (DELIMITER lines work as in the mysql
-- client), under the install named lock: after sql/mysql/fencemigrate--0.3.sql on a fresh
-- install, on its own on a database at 0.3.

UPDATE @extschema@_schema_version SET version = '0.4' WHERE one_row = 1;
