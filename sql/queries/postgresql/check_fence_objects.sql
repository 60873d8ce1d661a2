-- The fence schema :quoted_schema as the catalogs have it, for `fencemigrate check --db`, which
-- compares it with the install scripts: its tables, its triggers (definition, and whether they
-- fire: tgenabled 'O' or 'A'; 'D' is disabled, and 'R' fires only in
-- replication sessions, so it does not guard anything either) and its functions (body). One row per object.
WITH fence AS (
    SELECT n.oid
      FROM pg_catalog.pg_namespace n
     WHERE n.nspname = (pg_catalog.parse_ident(:quoted_schema))[1]
)
SELECT 'table' AS kind, c.relname AS name, NULL AS definition, true AS enabled
  FROM pg_catalog.pg_class c
 WHERE c.relnamespace = (SELECT oid FROM fence)
   AND c.relkind IN ('r', 'p')
UNION ALL
SELECT 'trigger', t.tgname, pg_catalog.pg_get_triggerdef(t.oid), t.tgenabled IN ('O', 'A')
  FROM pg_catalog.pg_trigger t
  JOIN pg_catalog.pg_class c ON c.oid = t.tgrelid
 WHERE c.relnamespace = (SELECT oid FROM fence)
   AND NOT t.tgisinternal
UNION ALL
SELECT 'function', p.proname, p.prosrc, true
  FROM pg_catalog.pg_proc p
 WHERE p.pronamespace = (SELECT oid FROM fence)
 ORDER BY 1, 2
