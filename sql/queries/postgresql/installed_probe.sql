-- Whether the fence schema is installed: one row when {schema}.schema_version() exists.
-- A plain scan of the catalogs, not a name lookup (to_regprocedure): a lookup that finds nothing
-- is cached by this session, and would hide an install that another session commits while this
-- transaction waits for the install lock.
SELECT 1
  FROM pg_catalog.pg_proc p
  JOIN pg_catalog.pg_namespace n ON n.oid = p.pronamespace
 WHERE n.nspname = (pg_catalog.parse_ident(:quoted_schema))[1]
   AND p.proname = 'schema_version'
   AND p.pronargs = 0
