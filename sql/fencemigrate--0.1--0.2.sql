-- fencemigrate 0.1 -> 0.2: leases that issue the tokens, and the event log.
--
-- ALTER EXTENSION fencemigrate UPDATE TO '0.2' runs this file; the runner applies it itself
-- to a database at 0.1 (a fresh install runs the current version's full script instead).
\echo Use "ALTER EXTENSION fencemigrate UPDATE TO '0.2'" to load this file. \quit

CREATE OR REPLACE FUNCTION @extschema@.schema_version() RETURNS text
LANGUAGE sql IMMUTABLE
AS $$ SELECT '0.2'::text $$;

-- One row per resource ever leased. token is the highest token the lease service has issued
-- for the resource: the durable counter. It only goes up (see lease_guard()), and every grant
-- issues greatest(token, agent_fence.token) + 1, so a token is never issued twice and is
-- always above every token the fence has seen. holder and expires_at are NULL when released.
CREATE TABLE @extschema@.lease (
    resource   text        PRIMARY KEY
               CHECK (resource <> '' AND length(resource) <= 255),
    token      bigint      NOT NULL CHECK (token >= 0),
    holder     text        CHECK (holder <> '' AND length(holder) <= 255),
    ttl_ms     bigint      CHECK (ttl_ms > 0),
    granted_at timestamptz,
    expires_at timestamptz,
    CHECK ((holder IS NULL) = (expires_at IS NULL))
);
COMMENT ON TABLE @extschema@.lease IS
    'Lease per resource, judged by the database clock; token is the durable token counter.';

CREATE FUNCTION @extschema@.lease_guard() RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF TG_OP = 'UPDATE' AND NEW.resource = OLD.resource AND NEW.token >= OLD.token THEN
        RETURN NEW;
    END IF;
    RAISE EXCEPTION USING ERRCODE = 'FM002',
        MESSAGE = format('the lease token counter is monotonic: %s of lease %s is not allowed',
                         CASE WHEN TG_OP = 'UPDATE' THEN 'lowering or renaming' ELSE lower(TG_OP) END,
                         coalesce(OLD.resource, '(all)'));
END
$$;

CREATE TRIGGER lease_monotonic
    BEFORE UPDATE OR DELETE ON @extschema@.lease
    FOR EACH ROW EXECUTE FUNCTION @extschema@.lease_guard();

CREATE TRIGGER lease_no_truncate
    BEFORE TRUNCATE ON @extschema@.lease
    FOR EACH STATEMENT EXECUTE FUNCTION @extschema@.lease_guard();

-- The story of every resource, for `fencemigrate timeline`: lease grants, renewals, releases,
-- expiries seen, preemptions, applied and rolled-back revisions, FENCED rejections.
-- Times are the database's (clock_timestamp(): when it happened, not when its transaction began).
CREATE TABLE @extschema@.fence_event (
    id       bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    at       timestamptz NOT NULL DEFAULT clock_timestamp(),
    resource text        NOT NULL,
    kind     text        NOT NULL CHECK (kind IN ('GRANT', 'RENEW', 'RELEASE', 'EXPIRE', 'PREEMPT',
                                                  'LOST', 'APPLY', 'STAMP', 'ROLLBACK', 'FENCED')),
    holder   text,
    token    bigint,
    revision text,
    detail   text
);
CREATE INDEX fence_event_resource_at ON @extschema@.fence_event (resource, at);
COMMENT ON TABLE @extschema@.fence_event IS
    'Append-only event log: read it with fencemigrate timeline.';

-- Ledger writes now log APPLY/STAMP and ROLLBACK events in the same transaction, and a
-- rollback names who rolled back under which token. The 0.1 functions keep doing the ledger
-- work under new names; the public names wrap them.
ALTER FUNCTION @extschema@.record_apply(text, text, text, bigint, text, text, text)
    RENAME TO write_ledger_row;
CREATE FUNCTION @extschema@.record_apply(
    p_version_table text, p_revision text, p_resource text, p_token bigint,
    p_holder text, p_method text, p_script_sha256 text
) RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM @extschema@.write_ledger_row(p_version_table, p_revision, p_resource, p_token,
                                         p_holder, p_method, p_script_sha256);
    INSERT INTO @extschema@.fence_event (resource, kind, holder, token, revision)
    VALUES (p_resource, CASE WHEN p_method = 'stamp' THEN 'STAMP' ELSE 'APPLY' END,
            p_holder, p_token, p_revision);
END
$$;

ALTER FUNCTION @extschema@.record_rollback(text, text) RENAME TO delete_ledger_row;
CREATE FUNCTION @extschema@.record_rollback(
    p_version_table text, p_revision text, p_resource text, p_token bigint, p_holder text
) RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM @extschema@.delete_ledger_row(p_version_table, p_revision);
    INSERT INTO @extschema@.fence_event (resource, kind, holder, token, revision)
    VALUES (p_resource, 'ROLLBACK', p_holder, p_token, p_revision);
END
$$;

CREATE OR REPLACE FUNCTION @extschema@.record_steps(
    p_version_table text, p_resource text, p_token bigint, p_holder text,
    p_actions text[], p_revisions text[], p_methods text[], p_shas text[]
) RETURNS bigint
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    FOR i IN 1 .. coalesce(array_length(p_actions, 1), 0) LOOP
        IF p_actions[i] = 'apply' THEN
            PERFORM @extschema@.record_apply(p_version_table, p_revisions[i], p_resource, p_token,
                                             p_holder, p_methods[i], p_shas[i]);
        ELSE
            PERFORM @extschema@.record_rollback(p_version_table, p_revisions[i], p_resource,
                                                p_token, p_holder);
        END IF;
    END LOOP;
    RETURN pg_current_xact_id()::text::bigint;
END
$$;

-- Taking back an early ledger row also takes back its APPLY event: nothing was applied yet.
CREATE OR REPLACE FUNCTION @extschema@.undo_record(p_version_table text, p_revision text) RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    DELETE FROM @extschema@.pending_version_check WHERE revision = p_revision;
    PERFORM @extschema@.delete_ledger_row(p_version_table, p_revision);
    DELETE FROM @extschema@.fence_event
     WHERE revision = p_revision AND kind = 'APPLY' AND xmin = pg_current_xact_id()::xid;
END
$$;

-- The claim now also takes a shared advisory lock on the resource until its transaction ends,
-- so that a lease grant with --preempt can find a stale writer's in-flight transaction in
-- pg_locks and cancel it. Keys: classid 1718503789, objid hashtext(resource) (preempt_pids.sql).
ALTER FUNCTION @extschema@.claim(text, bigint) RENAME TO claim_fence_row;
CREATE FUNCTION @extschema@.claim(p_resource text, p_token bigint) RETURNS bigint
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM pg_advisory_xact_lock_shared(1718503789, hashtext(p_resource));
    RETURN @extschema@.claim_fence_row(p_resource, p_token);
END
$$;
