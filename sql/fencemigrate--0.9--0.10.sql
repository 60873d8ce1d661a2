-- fencemigrate 0.9 -> 0.10: hardening, round two (issue 24).
--
-- ALTER EXTENSION fencemigrate UPDATE TO '0.10' runs this file; the runner applies it itself
-- to a database at 0.9 (a fresh install runs the current version's full script instead).
\echo Use "ALTER EXTENSION fencemigrate UPDATE TO '0.10'" to load this file. \quit

CREATE OR REPLACE FUNCTION @extschema@.schema_version() RETURNS text
LANGUAGE sql IMMUTABLE
AS $$ SELECT '0.10'::text $$;
