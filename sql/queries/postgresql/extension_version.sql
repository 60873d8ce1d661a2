-- The version of the fencemigrate extension when it was loaded with CREATE EXTENSION into the
-- fence schema :quoted_schema, else no row (a runner-installed copy elsewhere is not the extension).
SELECT e.extversion
  FROM pg_catalog.pg_extension e
  JOIN pg_catalog.pg_namespace n ON n.oid = e.extnamespace
 WHERE e.extname = 'fencemigrate'
   AND n.nspname = (pg_catalog.parse_ident(:quoted_schema))[1]
