-- fencemigrate 0.3 -> 0.4: a hardened fence (issue 12).
--
-- ALTER EXTENSION fencemigrate UPDATE TO '0.4' runs this file; the runner applies it itself
-- to a database at 0.3 (a fresh install runs the current version's full script instead).
\echo Use "ALTER EXTENSION fencemigrate UPDATE TO '0.4'" to load this file. \quit

CREATE OR REPLACE FUNCTION @extschema@.schema_version() RETURNS text
LANGUAGE sql IMMUTABLE
AS $$ SELECT '0.4'::text $$;

-- == token sources and the token domain (issue 12, defect 3) ==
-- Where a resource's tokens come from: 'external' (a harness's own leases pass --token; the
-- first claim of a resource seeds its row so), or a lease service that grants them, 'lease service'
-- (built in) or 'redis'. A grant advances the fence to the token it issued and sets the source
-- (grant_fence.sql), so on a leased resource the fence token is the last token issued: claim()
-- refuses any higher token as never issued (FENCED). `fencemigrate lease detach` sets it back
-- to 'external'. Rows of databases updated from 0.3: the source of their last grant, if any.
ALTER TABLE @extschema@.agent_fence
    ADD COLUMN token_source text NOT NULL DEFAULT 'external'
        CHECK (token_source IN ('external', 'lease service', 'redis'));
UPDATE @extschema@.agent_fence f
   SET token_source = CASE WHEN g.detail LIKE '%"lease_service": "redis"%' THEN 'redis' ELSE 'lease service' END
  FROM (SELECT DISTINCT ON (resource) resource, detail FROM @extschema@.fence_event
         WHERE kind = 'GRANT' ORDER BY resource, at DESC, id DESC) g
 WHERE g.resource = f.resource;

-- Tokens are 1 .. 2^62 (4611686018427387904): a grant issues at most one above the fence, so no
-- token can make it overflow bigint. NOT VALID: a row already above (a database written with
-- 2^63-1 before 0.4) stays readable; its next grant is refused cleanly by the lease service.
ALTER TABLE @extschema@.agent_fence
    ADD CONSTRAINT agent_fence_token_domain CHECK (token <= 4611686018427387904) NOT VALID;
ALTER TABLE @extschema@.lease
    ADD CONSTRAINT lease_token_domain CHECK (token <= 4611686018427387904) NOT VALID;
ALTER TABLE @extschema@.applied_revision
    ADD CONSTRAINT applied_revision_token_domain CHECK (applied_token <= 4611686018427387904) NOT VALID;

-- The reason of a FENCED claim whose token the resource's lease service never issued.
CREATE FUNCTION @extschema@.never_issued(
    p_resource text, p_token bigint, p_fence_token bigint, p_source text
) RETURNS text
LANGUAGE sql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT format('token %s was never issued by %s for %s (the last token it issued is %s)',
                  p_token, CASE WHEN p_source = 'redis' THEN 'the lease service (Redis)'
                                ELSE 'the lease service' END,
                  p_resource, p_fence_token)
$$;

-- The claim's row work (claim() takes the shared advisory lock of 0.2, then calls this): the
-- fence row locked, and rewritten only when the token goes up. FM001 when a higher token has
-- written, or when a token above the fence comes to a leased resource: its service never issued it.
CREATE OR REPLACE FUNCTION @extschema@.claim_fence_row(p_resource text, p_token bigint) RETURNS bigint
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_fence  bigint;
    v_source text;
BEGIN
    IF p_token IS NULL OR p_token < 1 OR p_token > 4611686018427387904 THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('fencing token must be an integer from 1 to 4611686018427387904, got %s', p_token);
    END IF;
    SELECT f.token, f.token_source INTO v_fence, v_source
      FROM @extschema@.agent_fence f WHERE f.resource = p_resource FOR UPDATE;
    IF NOT FOUND THEN
        INSERT INTO @extschema@.agent_fence (resource, token) VALUES (p_resource, p_token)
        ON CONFLICT (resource) DO NOTHING;
        IF FOUND THEN
            RETURN pg_current_xact_id()::text::bigint;
        END IF;
        SELECT f.token, f.token_source INTO v_fence, v_source
          FROM @extschema@.agent_fence f WHERE f.resource = p_resource FOR UPDATE;
    END IF;
    IF v_fence > p_token THEN
        PERFORM @extschema@.raise_fenced(p_resource, p_token, v_fence,
            format('token %s has since written to %s', v_fence, p_resource));
    ELSIF v_fence < p_token THEN
        IF v_source <> 'external' THEN
            PERFORM @extschema@.raise_fenced(p_resource, p_token, v_fence,
                @extschema@.never_issued(p_resource, p_token, v_fence, v_source));
        END IF;
        UPDATE @extschema@.agent_fence SET token = p_token, updated_at = now() WHERE resource = p_resource;
    END IF;
    RETURN pg_current_xact_id()::text::bigint;
END
$$;

-- A re-apply is refused the same way before anything is rolled back.
CREATE OR REPLACE FUNCTION @extschema@.check_reapply(
    p_version_table text, p_resource text, p_revisions text[], p_token bigint
) RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_revision text;
    v_applied  bigint;
    v_fence    bigint;
    v_source   text;
BEGIN
    SELECT f.token, f.token_source INTO v_fence, v_source
      FROM @extschema@.agent_fence f WHERE f.resource = p_resource;
    IF v_fence > p_token THEN
        PERFORM @extschema@.raise_fenced(p_resource, p_token, v_fence,
            format('token %s has since written to %s', v_fence, p_resource));
    ELSIF v_fence < p_token AND v_source <> 'external' THEN
        PERFORM @extschema@.raise_fenced(p_resource, p_token, v_fence,
            @extschema@.never_issued(p_resource, p_token, v_fence, v_source));
    END IF;
    FOREACH v_revision IN ARRAY p_revisions LOOP
        SELECT a.applied_token INTO v_applied
          FROM @extschema@.applied_revision a
         WHERE a.version_table = p_version_table AND a.revision = v_revision;
        IF NOT FOUND THEN
            PERFORM @extschema@.raise_fenced(p_resource, p_token, v_fence,
                format('%s has no fence record (it was applied outside fencemigrate), so no token may re-apply it',
                       v_revision));
        ELSIF v_applied <> p_token THEN
            PERFORM @extschema@.raise_fenced(p_resource, p_token, v_fence,
                format('%s was applied under token %s, not yours', v_revision, v_applied));
        END IF;
    END LOOP;
END
$$;
-- == end of token sources (issue 12, defect 3) ==

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

-- == Writes without a token (issue 12, defect 5) ==
-- Once a database is fenced, Alembic's version table refuses every write from a transaction that
-- has not claimed the fence: plain `alembic upgrade`, `downgrade` or `stamp` on a fenced database
-- fails, and PostgreSQL rolls the revision's DDL back with it. claim() holds a transaction-level
-- shared advisory lock on (1718503789, hashtext(resource)) until its transaction ends, and
-- pre-check mode's named_lock() a session-level one on the same keys: a version-table write is
-- allowed when this backend holds that lock for some resource. guard_version_table() puts the
-- guard trigger on a version table (once it exists); allow_tokenless_writes() takes it off and
-- records the opt-out, which every later run respects.
CREATE TABLE @extschema@.tokenless_writes_allowed (
    version_table text        PRIMARY KEY,
    allowed_at    timestamptz NOT NULL DEFAULT now()
);
COMMENT ON TABLE @extschema@.tokenless_writes_allowed IS
    'Version tables whose guard was removed on purpose (fencemigrate install --allow-tokenless-writes).';

CREATE FUNCTION @extschema@.refuse_tokenless_write() RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_locks l
                    WHERE l.locktype = 'advisory' AND l.classid = 1718503789 AND l.objsubid = 2
                      AND l.pid = pg_backend_pid() AND l.granted) THEN
        RAISE EXCEPTION USING
            ERRCODE = 'FM005',
            MESSAGE = format('fencemigrate refused this %s on the Alembic version table %s.%s: the transaction '
                             'carries no fencing token (it never claimed the fence), so nothing was applied. '
                             'Migrate this database with fencemigrate (upgrade, downgrade, stamp: with --token N, '
                             'or let it take a lease), not with plain alembic; to allow tokenless writes on purpose, '
                             'run `fencemigrate install --allow-tokenless-writes`.',
                             lower(TG_OP), TG_TABLE_SCHEMA, TG_TABLE_NAME);
    END IF;
    RETURN NULL;
END
$$;

-- Put the guard on the version table p_table (ledger name p_version_table; NULL: it does not
-- exist yet) unless it is there already or tokenless writes were allowed on purpose. True when the
-- table is guarded afterwards. Callers resolve the table with to_regclass() on their search_path.
CREATE FUNCTION @extschema@.guard_version_table(p_version_table text, p_table regclass) RETURNS boolean
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF p_table IS NULL OR EXISTS (SELECT 1 FROM @extschema@.tokenless_writes_allowed a
                                   WHERE a.version_table = p_version_table) THEN
        RETURN false;
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pg_trigger t
                    WHERE t.tgrelid = p_table AND t.tgname = 'fencemigrate_no_tokenless_write') THEN
        -- Concurrent first runs: the second waits here for the first's commit, then finds the trigger.
        EXECUTE format('LOCK TABLE %s IN SHARE ROW EXCLUSIVE MODE', p_table);
        IF NOT EXISTS (SELECT 1 FROM pg_trigger t
                        WHERE t.tgrelid = p_table AND t.tgname = 'fencemigrate_no_tokenless_write') THEN
            EXECUTE format('CREATE TRIGGER %I BEFORE INSERT OR UPDATE OR DELETE OR TRUNCATE ON %s '
                           'FOR EACH STATEMENT EXECUTE FUNCTION %s()',
                           'fencemigrate_no_tokenless_write', p_table,
                           '@extschema@.refuse_tokenless_write');
        END IF;
    END IF;
    RETURN true;
END
$$;

-- Opt out: record that p_version_table takes tokenless writes, and remove its guard.
CREATE FUNCTION @extschema@.allow_tokenless_writes(p_version_table text, p_table regclass) RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    INSERT INTO @extschema@.tokenless_writes_allowed (version_table) VALUES (p_version_table)
    ON CONFLICT (version_table) DO NOTHING;
    IF p_table IS NOT NULL THEN
        EXECUTE format('DROP TRIGGER IF EXISTS %I ON %s', 'fencemigrate_no_tokenless_write', p_table);
    END IF;
END
$$;

-- Opt back in: forget the opt-out and guard the version table again.
CREATE FUNCTION @extschema@.forbid_tokenless_writes(p_version_table text, p_table regclass) RETURNS boolean
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    DELETE FROM @extschema@.tokenless_writes_allowed WHERE version_table = p_version_table;
    RETURN @extschema@.guard_version_table(p_version_table, p_table);
END
$$;
