-- `fencemigrate install --grant-to ROLE`: Alembic's version table :relation when the owner of the
-- fence schema :quoted_schema (the installing role, before it is installed) does not own it (no row
-- otherwise): its owner, whether the installing role may give it to the fence's owner, and the
-- statement that does. Whoever owns the table can drop its guard trigger.
WITH fence AS (
    SELECT coalesce((SELECT n.nspowner FROM pg_namespace n WHERE n.nspname = (parse_ident(:quoted_schema))[1]),
                    (SELECT r.oid FROM pg_roles r WHERE r.rolname = current_user)) AS owner
)
SELECT c.relowner::regrole::text AS owner,
       pg_has_role(current_user, c.relowner, 'USAGE') AND pg_has_role(current_user, f.owner, 'USAGE') AS can_take,
       format('ALTER TABLE %s OWNER TO %I', c.oid::regclass, f.owner::regrole::text) AS statement
  FROM pg_class c, fence f
 WHERE c.oid = to_regclass(:relation)
   AND c.relowner <> f.owner
