-- fencemigrate 0.3 -> 0.4: a hardened fence (issue 12).
--
-- ALTER EXTENSION fencemigrate UPDATE TO '0.4' runs this file; the runner applies it itself
-- after the earlier scripts (fresh installs) or on its own (databases at 0.3).
\echo Use "ALTER EXTENSION fencemigrate UPDATE TO '0.4'" to load this file. \quit

CREATE OR REPLACE FUNCTION @extschema@.schema_version() RETURNS text
LANGUAGE sql IMMUTABLE
AS $$ SELECT '0.4'::text $$;

-- == Two roles: the fence owned by a role that does not migrate (issue 12, defect 4) ==
-- The role that owns the fence tables can switch their guard triggers off (ALTER TABLE ...
-- DISABLE TRIGGER), so the role that runs migrations should not own them. `fencemigrate install
-- --grant-to ROLE`, run by the owner, calls grant_to_migration_role(ROLE): ROLE can then run every
-- fencemigrate command, but cannot alter, disable, drop or truncate anything of the fence. It gets
-- SELECT on every table, EXECUTE on every function, and only the writes the runner makes itself:
--   * agent_fence, lease: INSERT and UPDATE (the first claim and grant seed a row; a claim locks
--     and raises it); the guard triggers, which ROLE cannot disable, refuse lowering a token,
--     renaming, DELETE; TRUNCATE is not granted;
--   * applied_revision: INSERT, UPDATE, DELETE (the ledger: upgrades, rollbacks, pre-check marks,
--     resolve); a row written above the fence is reported by check --db (FM411);
--   * fence_event: INSERT only, the log is append-only for ROLE (undo_record() takes back its own
--     transaction's APPLY event as the owner, below);
--   * pending_version_check: INSERT and DELETE (the COMMIT check, which runs as the committing role).
-- ROLE must not be a superuser or a member of the owner: either could act as the owner.
CREATE FUNCTION @extschema@.grant_to_migration_role(p_role text) RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_owner oid := (SELECT n.nspowner FROM pg_namespace n WHERE n.oid = '@extschema@'::regnamespace);
BEGIN
    IF NOT pg_has_role(current_user, v_owner, 'USAGE') THEN
        RAISE EXCEPTION USING ERRCODE = '42501',
            MESSAGE = format('only the owner of the fence schema (%s) can grant to a migration role, not %s',
                             v_owner::regrole, current_user);
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pg_roles r WHERE r.rolname = p_role) THEN
        RAISE EXCEPTION USING ERRCODE = '42704', MESSAGE = format('role %s does not exist', p_role);
    END IF;
    IF (SELECT r.rolsuper FROM pg_roles r WHERE r.rolname = p_role) THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('role %s is a superuser: it could switch the guard off whoever owns the fence', p_role);
    END IF;
    IF pg_has_role(p_role, v_owner, 'MEMBER') THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('role %s owns the fence schema (or is a member of its owner %s): name the role that '
                             'runs migrations, and install as another one', p_role, v_owner::regrole);
    END IF;
    EXECUTE format('REVOKE ALL ON ALL TABLES IN SCHEMA @extschema@ FROM %I', p_role);
    EXECUTE format('GRANT USAGE ON SCHEMA @extschema@ TO %I', p_role);
    EXECUTE format('GRANT SELECT ON ALL TABLES IN SCHEMA @extschema@ TO %I', p_role);
    EXECUTE format('GRANT INSERT, UPDATE ON @extschema@.agent_fence, @extschema@.lease TO %I', p_role);
    EXECUTE format('GRANT INSERT, UPDATE, DELETE ON @extschema@.applied_revision TO %I', p_role);
    EXECUTE format('GRANT INSERT ON @extschema@.fence_event TO %I', p_role);
    EXECUTE format('GRANT INSERT, DELETE ON @extschema@.pending_version_check TO %I', p_role);
    EXECUTE format('GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA @extschema@ TO %I', p_role);
END
$$;

-- undo_record() deletes its own transaction's APPLY event, which the migration role may not do
-- itself (see above): it runs as the owner of the fence.
ALTER FUNCTION @extschema@.undo_record(text, text) SECURITY DEFINER;
