-- For `fencemigrate install`: the statements that make the disabled triggers of the fence schema
-- :quoted_schema fire again (tgenabled 'D', or 'R': replication sessions only), one row per trigger.
SELECT t.tgname AS name,
       pg_catalog.format('ALTER TABLE %s ENABLE TRIGGER %I', t.tgrelid::pg_catalog.regclass, t.tgname) AS statement
  FROM pg_catalog.pg_trigger t
  JOIN pg_catalog.pg_class c ON c.oid = t.tgrelid
  JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
 WHERE n.nspname = (pg_catalog.parse_ident(:quoted_schema))[1]
   AND NOT t.tgisinternal
   AND t.tgenabled NOT IN ('O', 'A')
 ORDER BY t.tgname
