-- fencemigrate 0.3 -> 0.4: a hardened fence (issue 12).
--
-- ALTER EXTENSION fencemigrate UPDATE TO '0.4' runs this file; the runner applies it itself
-- after the earlier scripts (fresh installs) or on its own (databases at 0.3).
\echo Use "ALTER EXTENSION fencemigrate UPDATE TO '0.4'" to load this file. \quit

CREATE OR REPLACE FUNCTION @extschema@.schema_version() RETURNS text
LANGUAGE sql IMMUTABLE
AS $$ SELECT '0.4'::text $$;
