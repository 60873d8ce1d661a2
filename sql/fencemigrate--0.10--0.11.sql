-- fencemigrate 0.10 -> 0.11: a fence whose tokens come from Redis stays at or below the last token a
-- Redis grant recorded (issue 24, defect 6).
--
-- ALTER EXTENSION fencemigrate UPDATE TO '0.11' runs this file; the runner applies it itself
-- to a database at 0.10 (a fresh install runs the current version's full script instead).
\echo Use "ALTER EXTENSION fencemigrate UPDATE TO '0.11'" to load this file. \quit

CREATE OR REPLACE FUNCTION @extschema@.schema_version() RETURNS text
LANGUAGE sql IMMUTABLE
AS $$ SELECT '0.11'::text $$;
