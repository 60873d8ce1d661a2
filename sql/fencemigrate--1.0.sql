-- fencemigrate 1.0: the fence schema, complete.
--
-- CREATE EXTENSION fencemigrate (at the default version, 1.0) runs this file alone; the runner
-- applies the same file itself when the extension is not installed on the server, putting the
-- objects in the configured schema ("fencemigrate" by default). Later versions come with upgrade
-- scripts (fencemigrate--1.0--1.1.sql, ...), applied by ALTER EXTENSION fencemigrate UPDATE or the
-- runner. 1.0 squashes the pre-release versions 0.1 to 0.12, whose history still shapes some
-- objects: functions renamed on the way keep doing the work under their new names
-- (claim_fence_row, write_ledger_row, delete_ledger_row), and the token domain checks are NOT VALID.
--
-- Sections: the fence and the claim; the ledger and the event log; one revision per transaction;
-- leases and their guards; pre-check mode's named lock; two roles; writes without a token; dump and
-- restore.
--
-- Advisory locks (PostgreSQL's, two keys: classid, objid = the resource's lock key, see
-- resource_lock_key); the keys never change, whichever version of fencemigrate or of this schema
-- takes them (sql/advisory_locks.conf names them for the runner's queries):
--   * 1718503789, the claim lock: claim() holds it shared until its transaction ends, pre-check
--     mode's named_lock() shared for its session; a lease grant takes it exclusively;
--   * 1718503790, pre-check mode's named lock: exclusive, for a writer's whole session.
\echo Use "CREATE EXTENSION fencemigrate" to load this file. \quit

-- The version of this schema, read by the runner to decide what to install.
CREATE FUNCTION @extschema@.schema_version() RETURNS text
LANGUAGE sql IMMUTABLE
AS $$ SELECT '1.0'::text $$;


-- == The fence and the claim ==

-- One row per fenced resource: the highest token that has ever written to it.
--   token_source: where the resource's tokens come from: 'external' (a harness's own leases pass
--     --token; the first claim of a resource seeds its row so), or a lease service that grants
--     them, 'lease service' (built in) or 'redis'. A grant advances the fence to the token it
--     issued and sets the source (grant_fence in queries/postgresql.sql), so on a leased resource the
--     fence token is the last token issued: claim() refuses any higher token as never issued
--     (FENCED). `fencemigrate lease detach` sets it back to 'external'.
--   incarnation: the incarnation of the database a lease service last granted on, written by
--     every grant: the cluster's system identifier, the WAL timeline it wrote on and the database's
--     OID (incarnation in queries/postgresql.sql), and for Redis grants the Redis server's run id. A
--     grant under another incarnation (a standby promoted, a point-in-time recovery, a restore into
--     a new cluster or database, a Redis restart or failover) may have lost the last grants issued:
--     it issues its token from an epoch further on, ((highest >> 32) + timeline) << 32, above every
--     token the lost history could have issued (see README, Replicated PostgreSQL). NULL: never
--     granted, or external tokens only.
CREATE TABLE @extschema@.agent_fence (
    resource     text        PRIMARY KEY
                 CHECK (resource <> '' AND length(resource) <= 255),
    token        bigint      NOT NULL CHECK (token > 0),
    updated_at   timestamptz NOT NULL DEFAULT now(),
    token_source text        NOT NULL DEFAULT 'external'
                 CHECK (token_source IN ('external', 'lease service', 'redis')),
    incarnation  text
);
COMMENT ON TABLE @extschema@.agent_fence IS
    'Highest fencing token seen per resource. Monotonic: see agent_fence_guard().';

-- Tokens are 1 .. 2^62 (4611686018427387904): a grant issues at most one above the fence, so no
-- token can make it overflow bigint. NOT VALID, so that a row already above (as restored from an
-- old dump) stays readable and its next grant is refused cleanly by the lease service; every new
-- or changed row is checked all the same.
ALTER TABLE @extschema@.agent_fence
    ADD CONSTRAINT agent_fence_token_domain CHECK (token <= 4611686018427387904) NOT VALID;

-- Raise FM001 (FENCED). DETAIL carries the fields as JSON for programs;
-- MESSAGE is written for whoever reads psql's output.
CREATE FUNCTION @extschema@.raise_fenced(
    p_resource text, p_token bigint, p_fence_token bigint, p_reason text
) RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    RAISE EXCEPTION USING
        ERRCODE = 'FM001',
        MESSAGE = format('FENCED: %s (resource %s, your token %s). This is NOT a transient error: '
                         'do not retry, rebase, renumber or re-apply; re-read the state and re-plan.',
                         p_reason, p_resource, p_token),
        DETAIL  = json_build_object('resource', p_resource, 'token', p_token,
                                    'fence_token', p_fence_token, 'reason', p_reason)::text;
END
$$;

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

-- The advisory lock key of each resource: claim(), a grant, --preempt and pre-check mode's named
-- lock key their locks by it, never by hashtext(resource) alone, which two names can share
-- (svc-32835 and svc-62004): a --preempt on one would end the other's migration. A resource gets
-- its key once (resource_key()) and keeps it: the key is hashtext(resource) unless another resource
-- has that one, else the first of hashtext(resource || '#1'), hashtext(resource || '#2'), ... that
-- no resource has (lock_key()). A fenced run registers its resource in a transaction of its own
-- before its first claim, a grant in its own transaction; a claim made otherwise (a --sql script,
-- plain SQL) registers it itself, unseen by a grant of another resource until it commits. The key a
-- resource will get is known from the committed rows alone, so a grant with --preempt finds the
-- first claim of the same resource still in flight by that key; two first claims of one key are
-- serialised by the key's unique index. Written only by register_lock_key() (the migration role
-- may read it, see Two roles); never changed or deleted.
CREATE TABLE @extschema@.resource_lock_key (
    resource text    PRIMARY KEY,
    key      integer NOT NULL UNIQUE
);
COMMENT ON TABLE @extschema@.resource_lock_key IS
    'The advisory lock key of each resource, assigned once: no two resources share one.';

CREATE FUNCTION @extschema@.resource_lock_key_guard() RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    RAISE EXCEPTION USING ERRCODE = 'FM002',
        MESSAGE = format('resource_lock_key is assigned once: %s of lock keys is not allowed', lower(TG_OP));
END
$$;

CREATE TRIGGER resource_lock_key_assigned_once
    BEFORE UPDATE OR DELETE ON @extschema@.resource_lock_key
    FOR EACH ROW EXECUTE FUNCTION @extschema@.resource_lock_key_guard();

CREATE TRIGGER resource_lock_key_no_truncate
    BEFORE TRUNCATE ON @extschema@.resource_lock_key
    FOR EACH STATEMENT EXECUTE FUNCTION @extschema@.resource_lock_key_guard();

-- The lock key of p_resource as the committed rows have it: its own, or the one it will get.
CREATE FUNCTION @extschema@.lock_key(p_resource text) RETURNS integer
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_key   integer;
    v_probe integer := 0;
BEGIN
    SELECT k.key INTO v_key FROM @extschema@.resource_lock_key k WHERE k.resource = p_resource;
    IF FOUND THEN
        RETURN v_key;
    END IF;
    v_key := hashtext(p_resource);
    WHILE EXISTS (SELECT 1 FROM @extschema@.resource_lock_key k WHERE k.key = v_key) LOOP
        v_probe := v_probe + 1;
        v_key := hashtext(p_resource || '#' || v_probe);
    END LOOP;
    RETURN v_key;
END
$$;

-- Give p_resource its key unless it has one; its key. A first claim of the same resource or key in
-- flight makes this wait for that transaction (at most lock_timeout). As the owner of the fence:
-- the migration role cannot write the table itself.
CREATE FUNCTION @extschema@.register_lock_key(p_resource text) RETURNS integer
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_key integer;
BEGIN
    LOOP
        v_key := @extschema@.lock_key(p_resource);
        INSERT INTO @extschema@.resource_lock_key (resource, key) VALUES (p_resource, v_key)
        ON CONFLICT DO NOTHING;
        IF FOUND THEN
            RETURN v_key;
        END IF;
        -- Registered meanwhile: this resource (then lock_key() returns its key) or another one
        -- with that key (then lock_key() goes on to the next).
        SELECT k.key INTO v_key FROM @extschema@.resource_lock_key k WHERE k.resource = p_resource;
        IF FOUND THEN
            RETURN v_key;
        END IF;
    END LOOP;
END
$$;

-- The lock key of p_resource, given now if it has none (the locks themselves are taken by the caller).
CREATE FUNCTION @extschema@.resource_key(p_resource text) RETURNS integer
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_key integer;
BEGIN
    SELECT k.key INTO v_key FROM @extschema@.resource_lock_key k WHERE k.resource = p_resource;
    RETURN coalesce(v_key, @extschema@.register_lock_key(p_resource));
END
$$;

-- The claim: claim(resource, token), run inside the migration's own transaction before any DDL.
-- It has the effect of
--   UPDATE agent_fence SET token = :t WHERE resource = :r AND token <= :t
-- with 0 rows meaning a higher token has written: FENCED (FM001), and the caller's transaction is
-- doomed. In two steps, both here:
--   1. claim() takes the claim lock, advisory lock (1718503789, resource_key(resource)), shared, until
--      its transaction ends: a lease grant with --preempt finds a stale writer's in-flight
--      transaction in pg_locks and cancels it (preempt_writers in queries/postgresql.sql), and the
--      version-table guard below knows this transaction claimed the fence;
--   2. claim_fence_row() does the row work: the fence row locked first and rewritten only when the
--      token goes up, so the usual case (the same token claiming again for its next revision)
--      writes no new row version; the first claim on a resource seeds its row. FM001 when a higher
--      token has written, or when a token above the fence comes to a leased resource: its service
--      never issued it. Either way the row stays locked until the transaction ends.
-- Both return the current transaction id, so the caller can prove its DDL ran in this transaction.
CREATE FUNCTION @extschema@.claim_fence_row(p_resource text, p_token bigint) RETURNS bigint
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

-- claim() also leaves the proof of its claim that the version table's guard reads (see "Writes
-- without a token"): this backend's row of claim_proof names its transaction, and under pre-check
-- mode's named lock the session's own proof, a temporary table. It runs as the owner of the fence
-- (SECURITY DEFINER), the only role that can write either: a transaction that never claimed has
-- no proof.
CREATE FUNCTION @extschema@.claim(p_resource text, p_token bigint) RETURNS bigint
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_xact bigint;
BEGIN
    PERFORM pg_advisory_xact_lock_shared(1718503789, @extschema@.resource_key(p_resource));
    v_xact := @extschema@.claim_fence_row(p_resource, p_token);
    UPDATE @extschema@.claim_proof SET xact = v_xact WHERE pid = pg_backend_pid();
    IF NOT FOUND THEN
        INSERT INTO @extschema@.claim_proof AS p (pid, xact) VALUES (pg_backend_pid(), v_xact)
        ON CONFLICT (pid) DO UPDATE SET xact = excluded.xact;
    END IF;
    IF to_regclass('pg_temp.fencemigrate_session_claim') IS NULL
       AND EXISTS (SELECT 1 FROM pg_locks l
                    WHERE l.locktype = 'advisory' AND l.classid = 1718503790 AND l.objsubid = 2
                      AND l.pid = pg_backend_pid() AND l.granted) THEN
        CREATE TEMPORARY TABLE fencemigrate_session_claim ();
    END IF;
    RETURN v_xact;
END
$$;

-- Re-applying is legal only for revisions applied under the caller's own token (an adopted
-- revision, applied before fencing, has none: token 0). Called before
-- claim(), so a rejection reports the fence token as committed; refused the same way as a claim
-- before anything is rolled back.
CREATE FUNCTION @extschema@.check_reapply(
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
        ELSIF v_applied = 0 THEN
            PERFORM @extschema@.raise_fenced(p_resource, p_token, v_fence,
                format('%s was applied before fencing (adopted: no token applied it), so no token may re-apply it',
                       v_revision));
        ELSIF v_applied <> p_token THEN
            PERFORM @extschema@.raise_fenced(p_resource, p_token, v_fence,
                format('%s was applied under token %s, not yours', v_revision, v_applied));
        END IF;
    END LOOP;
END
$$;

-- The monotonic guard: no client, fencemigrate or not, can lower a fence token,
-- rename a fenced resource, or delete or truncate fence rows (SQLSTATE FM002).
CREATE FUNCTION @extschema@.agent_fence_guard() RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF TG_OP = 'UPDATE' THEN
        IF NEW.resource IS DISTINCT FROM OLD.resource THEN
            RAISE EXCEPTION USING ERRCODE = 'FM002',
                MESSAGE = format('agent_fence is monotonic: resource %s cannot be renamed', OLD.resource);
        END IF;
        IF NEW.token < OLD.token THEN
            RAISE EXCEPTION USING ERRCODE = 'FM002',
                MESSAGE = format('agent_fence is monotonic: the token of %s cannot go down from %s to %s',
                                 OLD.resource, OLD.token, NEW.token);
        END IF;
        RETURN NEW;
    END IF;
    RAISE EXCEPTION USING ERRCODE = 'FM002',
        MESSAGE = format('agent_fence is monotonic: %s of fence rows is not allowed', lower(TG_OP));
END
$$;

CREATE TRIGGER agent_fence_monotonic
    BEFORE UPDATE OR DELETE ON @extschema@.agent_fence
    FOR EACH ROW EXECUTE FUNCTION @extschema@.agent_fence_guard();

CREATE TRIGGER agent_fence_no_truncate
    BEFORE TRUNCATE ON @extschema@.agent_fence
    FOR EACH STATEMENT EXECUTE FUNCTION @extschema@.agent_fence_guard();


-- == The ledger and the event log ==

-- One row per revision applied (or stamped) by a fenced run, per Alembic version table, and one
-- per revision the version table already had applied when the database was first fenced
-- (method 'adopt', applied_token 0: applied before fencing, by no token; see docs/adopting.md).
-- Pre-check mode (--mode precheck) cannot claim the fence in the transaction of a revision that
-- runs outside one, so it writes the revision's ledger row before the DDL, marked 'applying'
-- ('rolling_back' for a downgrade), commits that, and settles the row with Alembic's version row
-- afterwards. A row left unsettled is a dirty revision: fenced writes to its resource are refused
-- until `fencemigrate resolve` settles it. state_token / state_holder / state_since: the run that
-- started it.
-- source: the text of the revision file, as the run that wrote the row read it (the same bytes its
-- script_sha256 was computed from, decoded as UTF-8), for `fencemigrate show REV --applied` and
-- check --db's drift diff. NULL ("source not recorded") for a revision adopted with no readable
-- file, or a file that is not UTF-8 text. PostgreSQL compresses a text value of more than about 2 kB by
-- itself when it stores it (TOAST), and reads the column only when a query names it, so the
-- ledger's other readers never pay for it; lz4 where the server was built with it (faster than the
-- default pglz at a similar ratio on source code), pglz otherwise.
CREATE TABLE @extschema@.applied_revision (
    version_table text        NOT NULL,
    revision      text        NOT NULL,
    resource      text        NOT NULL,
    applied_token bigint      NOT NULL,
    holder        text        NOT NULL,
    method        text        NOT NULL,
    applied_at    timestamptz NOT NULL DEFAULT now(),
    script_sha256 text,
    state         text        NOT NULL DEFAULT 'applied'
                  CHECK (state IN ('applied', 'applying', 'rolling_back')),
    state_token   bigint,
    state_holder  text,
    state_since   timestamptz,
    source        text,
    PRIMARY KEY (version_table, revision),
    CONSTRAINT applied_revision_settled CHECK ((state = 'applied') = (state_token IS NULL)),
    CONSTRAINT applied_revision_method_check CHECK (method IN ('upgrade', 'stamp', 'adopt')),
    CONSTRAINT applied_revision_applied_token_check
        CHECK (CASE WHEN method = 'adopt' THEN applied_token = 0 ELSE applied_token > 0 END)
);
CREATE INDEX applied_revision_unsettled ON @extschema@.applied_revision (resource)
    WHERE state <> 'applied';
COMMENT ON TABLE @extschema@.applied_revision IS
    'Ledger: which token applied each revision. Re-applying is legal only under that token.';
COMMENT ON COLUMN @extschema@.applied_revision.source IS
    'The revision file''s text as applied (UTF-8; NULL: not recorded: adopted with no readable file, or not UTF-8).';
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_settings
                WHERE name = 'default_toast_compression' AND 'lz4' = ANY (enumvals)) THEN
        ALTER TABLE @extschema@.applied_revision ALTER COLUMN source SET COMPRESSION lz4;
    END IF;
END
$$;
-- The token domain of agent_fence, NOT VALID for the same reason.
ALTER TABLE @extschema@.applied_revision
    ADD CONSTRAINT applied_revision_token_domain CHECK (applied_token <= 4611686018427387904) NOT VALID;

-- The story of every resource, for `fencemigrate timeline`: lease grants, renewals, releases,
-- expiries seen, preemptions, applied and rolled-back revisions, FENCED rejections, dirty
-- revisions resolved by hand. Times are the database's (clock_timestamp(): when it happened, not
-- when its transaction began).
CREATE TABLE @extschema@.fence_event (
    id       bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    at       timestamptz NOT NULL DEFAULT clock_timestamp(),
    resource text        NOT NULL,
    kind     text        NOT NULL,
    holder   text,
    token    bigint,
    revision text,
    detail   text,
    CONSTRAINT fence_event_kind_check
        CHECK (kind IN ('GRANT', 'RENEW', 'RELEASE', 'EXPIRE', 'PREEMPT', 'LOST', 'APPLY', 'STAMP',
                        'ROLLBACK', 'UNSTAMP', 'FENCED', 'RESOLVE', 'ADOPT'))
);
CREATE INDEX fence_event_resource_at ON @extschema@.fence_event (resource, at);
COMMENT ON TABLE @extschema@.fence_event IS
    'Append-only event log: read it with fencemigrate timeline.';

-- Ledger bookkeeping, called in the same transaction as the revision's DDL (directly in --sql
-- scripts, through record_steps() and claim_and_record() online). record_apply() and
-- record_rollback() write the ledger row (write_ledger_row(), delete_ledger_row()) and log its
-- APPLY/STAMP or ROLLBACK/UNSTAMP event; a rollback names who rolled back under which token (and,
-- in its detail, the applied text whose downgrade() ran in place of a changed file's). They run as
-- the owner of the fence, which alone inserts into fence_event (see log_event()).

-- Writing the ledger row of an applied revision settles a row marked before its DDL.
CREATE FUNCTION @extschema@.write_ledger_row(
    p_version_table text, p_revision text, p_resource text, p_token bigint,
    p_holder text, p_method text, p_script_sha256 text, p_source text DEFAULT NULL
) RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF p_method = 'stamp' THEN
        -- A stamp never overwrites the record of a revision that really ran.
        INSERT INTO @extschema@.applied_revision
               (version_table, revision, resource, applied_token, holder, method, script_sha256, source)
        VALUES (p_version_table, p_revision, p_resource, p_token, p_holder, p_method, p_script_sha256, p_source)
        ON CONFLICT (version_table, revision) DO NOTHING;
    ELSE
        INSERT INTO @extschema@.applied_revision AS a
               (version_table, revision, resource, applied_token, holder, method, script_sha256, source)
        VALUES (p_version_table, p_revision, p_resource, p_token, p_holder, p_method, p_script_sha256, p_source)
        ON CONFLICT (version_table, revision) DO UPDATE
            SET resource = excluded.resource, applied_token = excluded.applied_token,
                holder = excluded.holder, method = excluded.method,
                applied_at = now(), script_sha256 = excluded.script_sha256, source = excluded.source,
                state = 'applied', state_token = NULL, state_holder = NULL, state_since = NULL;
    END IF;
END
$$;

CREATE FUNCTION @extschema@.delete_ledger_row(p_version_table text, p_revision text) RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    DELETE FROM @extschema@.applied_revision
     WHERE version_table = p_version_table AND revision = p_revision;
END
$$;

CREATE FUNCTION @extschema@.record_apply(
    p_version_table text, p_revision text, p_resource text, p_token bigint,
    p_holder text, p_method text, p_script_sha256 text, p_source text DEFAULT NULL
) RETURNS void
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM @extschema@.write_ledger_row(p_version_table, p_revision, p_resource, p_token,
                                         p_holder, p_method, p_script_sha256, p_source);
    INSERT INTO @extschema@.fence_event (resource, kind, holder, token, revision)
    VALUES (p_resource, CASE WHEN p_method = 'stamp' THEN 'STAMP' ELSE 'APPLY' END,
            p_holder, p_token, p_revision);
END
$$;

CREATE FUNCTION @extschema@.record_rollback(
    p_version_table text, p_revision text, p_resource text, p_token bigint, p_holder text,
    p_method text DEFAULT 'upgrade', p_detail text DEFAULT NULL
) RETURNS void
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM @extschema@.delete_ledger_row(p_version_table, p_revision);
    INSERT INTO @extschema@.fence_event (resource, kind, holder, token, revision, detail)
    VALUES (p_resource, CASE WHEN p_method = 'stamp' THEN 'UNSTAMP' ELSE 'ROLLBACK' END,
            p_holder, p_token, p_revision, p_detail::jsonb::text);
END
$$;

-- Several ledger changes in one round trip, in order: p_actions[i] is 'apply' (record_apply
-- with p_methods[i], p_shas[i] and p_sources[i]) or 'rollback' (record_rollback with p_methods[i]
-- and p_details[i]). Returns the transaction id, which the caller compares with its claim's to
-- prove that all of it ran in one transaction.
CREATE FUNCTION @extschema@.record_steps(
    p_version_table text, p_resource text, p_token bigint, p_holder text,
    p_actions text[], p_revisions text[], p_methods text[], p_shas text[], p_sources text[] DEFAULT NULL,
    p_details text[] DEFAULT NULL
) RETURNS bigint
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    FOR i IN 1 .. coalesce(array_length(p_actions, 1), 0) LOOP
        IF p_actions[i] = 'apply' THEN
            PERFORM @extschema@.record_apply(p_version_table, p_revisions[i], p_resource, p_token,
                                             p_holder, p_methods[i], p_shas[i], p_sources[i]);
        ELSE
            PERFORM @extschema@.record_rollback(p_version_table, p_revisions[i], p_resource,
                                                p_token, p_holder, p_methods[i], p_details[i]);
        END IF;
    END LOOP;
    RETURN pg_current_xact_id()::text::bigint;
END
$$;


-- == One revision per transaction ==

-- One revision per transaction (transaction_per_migration): claim, write the ledger row and
-- ask for a check at COMMIT, in one round trip before the revision's DDL. The check, a deferred
-- constraint trigger, proves that Alembic's version row is in this same transaction; a revision
-- that commits behind fencemigrate's back makes its COMMIT fail instead (SQLSTATE FM003).
-- claim_and_record() runs once per revision, so it does what claim() and record_apply() do in its
-- own body rather than through them (each call of a function with its own search_path costs):
-- keep the three in step. Like claim(), it runs as the owner of the fence, to write the proof of
-- its claim.
CREATE TABLE @extschema@.pending_version_check (
    version_table regclass NOT NULL,
    revision      text     NOT NULL,
    resource      text     NOT NULL,
    token         bigint   NOT NULL
);

CREATE FUNCTION @extschema@.claim_and_record(
    p_resource text, p_token bigint, p_version_table text, p_version_regclass regclass,
    p_revision text, p_holder text, p_script_sha256 text, p_source text DEFAULT NULL
) RETURNS bigint
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_fence bigint;
    v_xact  bigint := pg_current_xact_id()::text::bigint;
BEGIN
    -- The claim, as claim() makes it; the usual case (this token claimed the fence for the
    -- revision before) takes the row lock and goes on, anything else is claim_fence_row()'s.
    PERFORM pg_advisory_xact_lock_shared(1718503789, @extschema@.resource_key(p_resource));
    SELECT f.token INTO v_fence FROM @extschema@.agent_fence f WHERE f.resource = p_resource FOR UPDATE;
    IF p_token IS NULL OR v_fence IS DISTINCT FROM p_token THEN
        PERFORM @extschema@.claim_fence_row(p_resource, p_token);
    END IF;
    UPDATE @extschema@.claim_proof SET xact = v_xact WHERE pid = pg_backend_pid();
    IF NOT FOUND THEN
        INSERT INTO @extschema@.claim_proof AS p (pid, xact) VALUES (pg_backend_pid(), v_xact)
        ON CONFLICT (pid) DO UPDATE SET xact = excluded.xact;
    END IF;
    -- The ledger row and the APPLY event, as record_apply(..., 'upgrade', ...) writes them.
    INSERT INTO @extschema@.applied_revision AS a
           (version_table, revision, resource, applied_token, holder, method, script_sha256, source)
    VALUES (p_version_table, p_revision, p_resource, p_token, p_holder, 'upgrade', p_script_sha256, p_source)
    ON CONFLICT (version_table, revision) DO UPDATE
        SET resource = excluded.resource, applied_token = excluded.applied_token,
            holder = excluded.holder, method = excluded.method,
            applied_at = now(), script_sha256 = excluded.script_sha256, source = excluded.source,
            state = 'applied', state_token = NULL, state_holder = NULL, state_since = NULL;
    INSERT INTO @extschema@.fence_event (resource, kind, holder, token, revision)
    VALUES (p_resource, 'APPLY', p_holder, p_token, p_revision);
    INSERT INTO @extschema@.pending_version_check (version_table, revision, resource, token)
    VALUES (p_version_regclass, p_revision, p_resource, p_token);
    RETURN v_xact;
END
$$;

-- Take back what claim_and_record wrote, before something commits the transaction early: its
-- ledger row and its APPLY event (nothing was applied yet). It deletes its own transaction's
-- APPLY event, which the migration role may not do itself (see Two roles): it runs as the owner
-- of the fence.
CREATE FUNCTION @extschema@.undo_record(p_version_table text, p_revision text) RETURNS void
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    DELETE FROM @extschema@.pending_version_check WHERE revision = p_revision;
    PERFORM @extschema@.delete_ledger_row(p_version_table, p_revision);
    DELETE FROM @extschema@.fence_event
     WHERE revision = p_revision AND kind = 'APPLY' AND xmin = pg_current_xact_id()::xid;
END
$$;

CREATE FUNCTION @extschema@.check_version_row() RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_recorded boolean;
BEGIN
    DELETE FROM @extschema@.pending_version_check WHERE ctid = NEW.ctid;
    IF NOT FOUND THEN
        RETURN NULL;  -- taken back by undo_record
    END IF;
    -- The version table's guard noted its write (the usual case: nothing to search).
    IF current_setting('fencemigrate.version_written', true)
       = format('%s/%s', pg_current_xact_id(), NEW.version_table::oid) THEN
        RETURN NULL;
    END IF;
    -- Alembic writes the version row after the revision's DDL: if no row of the version table
    -- was written by this transaction, it is being committed from inside the revision.
    EXECUTE format('SELECT EXISTS (SELECT 1 FROM %s WHERE xmin = pg_current_xact_id()::xid)',
                   NEW.version_table)
       INTO v_recorded;
    IF NOT v_recorded THEN
        RAISE EXCEPTION USING ERRCODE = 'FM003',
            MESSAGE = format('revision %s committed its transaction before Alembic recorded it: '
                             'the fence claim (resource %s, token %s) cannot cover what would follow, '
                             'so this commit is refused', NEW.revision, NEW.resource, NEW.token);
    END IF;
    RETURN NULL;
END
$$;

CREATE CONSTRAINT TRIGGER version_row_in_claim_transaction
    AFTER INSERT ON @extschema@.pending_version_check
    DEFERRABLE INITIALLY DEFERRED
    FOR EACH ROW EXECUTE FUNCTION @extschema@.check_version_row();


-- == Leases and their guards ==

-- One row per resource ever leased. token is the highest token the lease service has issued
-- for the resource: the durable counter. It only goes up (see lease_guard()), and every grant
-- issues greatest(token, agent_fence.token) + 1, so a token is never issued twice and is
-- always above every token the fence has seen. holder and expires_at are NULL when released.
-- replication: how the lease's grant was replicated: 'synchronous' (the primary had synchronous
-- standbys; the grant committed synchronously whatever the session's synchronous_commit, and the
-- lease service reported it granted only once a standby had confirmed it), 'asynchronous' (no
-- synchronous standby: a failover may lose the grant, and the next grant after it starts a new
-- epoch).
CREATE TABLE @extschema@.lease (
    resource    text        PRIMARY KEY
                CHECK (resource <> '' AND length(resource) <= 255),
    token       bigint      NOT NULL CHECK (token >= 0),
    holder      text        CHECK (holder <> '' AND length(holder) <= 255),
    ttl_ms      bigint      CHECK (ttl_ms > 0),
    granted_at  timestamptz,
    expires_at  timestamptz,
    replication text        CHECK (replication IN ('synchronous', 'asynchronous')),
    CHECK ((holder IS NULL) = (expires_at IS NULL))
);
COMMENT ON TABLE @extschema@.lease IS
    'Lease per resource, judged by the database clock; token is the durable token counter.';
-- The token domain of agent_fence, NOT VALID for the same reason.
ALTER TABLE @extschema@.lease
    ADD CONSTRAINT lease_token_domain CHECK (token <= 4611686018427387904) NOT VALID;

-- leased: the resource, while its tokens come from the built-in lease service (NULL otherwise),
-- which then has its lease row: a foreign key, NOT VALID as the token domain checks are. It says
-- what the lease guards hold to anyway, and gives pg_dump the order in which a restore's COPY must
-- load the two tables for the guards to accept it (see Dump and restore).
ALTER TABLE @extschema@.agent_fence
    ADD COLUMN leased text GENERATED ALWAYS AS (CASE WHEN token_source = 'lease service' THEN resource END) STORED;
ALTER TABLE @extschema@.agent_fence
    ADD CONSTRAINT agent_fence_leased_fkey FOREIGN KEY (leased) REFERENCES @extschema@.lease (resource) NOT VALID;

-- The lease token counter is monotonic, like the fence (SQLSTATE FM002).
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

-- The lease guard. The role that runs migrations writes agent_fence and lease (see
-- grant_to_migration_role()); these triggers hold those writes to what a grant, renew, release,
-- detach or claim does, so plain SQL is no more powerful than the CLI: it can make a grant only as
-- a grant makes it (the next token, an expiry within the longest TTL, the incarnation the database
-- is on now), which is what `fencemigrate lease acquire` lets the same role do anyway. SQLSTATE
-- FM006, every message starting 'lease guard: '. A lease is live while it has a holder and
-- expires_at > clock_timestamp(), the clock the lease service judges it by.
--
-- The database's incarnation now, as incarnation in queries/postgresql.sql reads it, and its WAL
-- timeline: what a grant records, and what decides whether it moves to a new epoch.
CREATE FUNCTION @extschema@.database_incarnation(OUT incarnation text, OUT timeline bigint)
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT format('%s/%s/%s', (pg_control_system()).system_identifier, t.timeline,
                  (SELECT d.oid FROM pg_database d WHERE d.datname = current_database())),
           t.timeline
      FROM (SELECT ('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::bigint AS timeline) t
$$;

-- The token a grant issues above p_highest (the last token issued, or the fence's, whichever is
-- higher) when the resource's last grant recorded p_recorded: fencemigrate/leases/epochs.py's
-- next_token(), kept in step with it. The next token, never below the WAL timeline's epoch; the
-- first token of an epoch `timeline` epochs on when the database part of p_recorded
-- ('<database>' or '<database>+redis:<run id>') is not the incarnation the database is on now.
CREATE FUNCTION @extschema@.next_grant_token(p_highest bigint, p_recorded text) RETURNS bigint
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_now      record;
    v_recorded text;
BEGIN
    SELECT i.incarnation, i.timeline INTO v_now FROM @extschema@.database_incarnation() i;
    SELECT p INTO v_recorded FROM unnest(string_to_array(p_recorded, '+')) p WHERE strpos(p, ':') = 0 LIMIT 1;
    IF v_recorded IS NOT NULL AND v_recorded <> v_now.incarnation THEN
        RETURN ((p_highest >> 32) + v_now.timeline) << 32;
    END IF;
    RETURN greatest(p_highest + 1, (v_now.timeline - 1) << 32);
END
$$;

-- lease: a row starts free with its counter at 0 (as a grant seeds it). A token is never handed
-- to another holder (renew and release keep holder and token; release clears the holder); the
-- counter moves only with a grant, which issues exactly next_grant_token() above the counter and
-- the fence, to a holder, and only when the old lease is no longer live (a holder granted again
-- while its lease is live keeps it). A lease never runs longer than the longest TTL (24 hours)
-- from now; granted_at and replication change with a grant only. Holder names are not
-- credentials: a release, renew or grant naming the live holder is what the CLI allows.
CREATE FUNCTION @extschema@.lease_grant_guard() RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_fence       bigint;
    v_incarnation text;
    v_expected    bigint;
BEGIN
    IF TG_OP = 'INSERT' THEN
        -- The owner may insert a lease as it was (a restore's COPY: see Dump and restore); it could
        -- switch this trigger off anyway.
        IF (NEW.token <> 0 OR NEW.holder IS NOT NULL OR NEW.granted_at IS NOT NULL OR NEW.replication IS NOT NULL)
           AND NOT pg_has_role(current_user, (SELECT c.relowner FROM pg_class c WHERE c.oid = TG_RELID), 'USAGE') THEN
            RAISE EXCEPTION USING ERRCODE = 'FM006',
                MESSAGE = format('lease guard: the lease of %s starts free with its token counter at 0, as a grant '
                                 'seeds it; only a grant then issues a token', NEW.resource);
        END IF;
        RETURN NEW;
    END IF;
    IF NEW.expires_at > clock_timestamp() + interval '24 hours' THEN
        RAISE EXCEPTION USING ERRCODE = 'FM006',
            MESSAGE = format('lease guard: the lease of %s cannot run until %s: a lease TTL is at most 24 hours',
                             NEW.resource, NEW.expires_at);
    END IF;
    IF NEW.token = OLD.token THEN
        IF NEW.holder IS NOT NULL AND NEW.holder IS DISTINCT FROM OLD.holder THEN
            RAISE EXCEPTION USING ERRCODE = 'FM006',
                MESSAGE = format('lease guard: token %s of %s was %s: a new holder needs a new token, which only a '
                                 'grant issues', OLD.token, OLD.resource,
                                 CASE WHEN OLD.holder IS NULL THEN 'released' ELSE 'issued to ' || OLD.holder END);
        END IF;
        IF (NEW.granted_at IS NOT NULL AND NEW.granted_at IS DISTINCT FROM OLD.granted_at)
           OR NEW.replication IS DISTINCT FROM OLD.replication THEN
            RAISE EXCEPTION USING ERRCODE = 'FM006',
                MESSAGE = format('lease guard: the grant of token %s of %s is what it was: only a grant sets when '
                                 'and how a lease was granted', OLD.token, OLD.resource);
        END IF;
        RETURN NEW;
    END IF;
    IF OLD.holder IS NOT NULL AND NEW.holder IS DISTINCT FROM OLD.holder AND OLD.expires_at > clock_timestamp() THEN
        RAISE EXCEPTION USING ERRCODE = 'FM006',
            MESSAGE = format('lease guard: the lease of %s is held by %s (token %s) until %s: only a grant gives it '
                             'to another holder, once it is released or has expired',
                             OLD.resource, OLD.holder, OLD.token, OLD.expires_at);
    END IF;
    SELECT f.token, f.incarnation INTO v_fence, v_incarnation
      FROM @extschema@.agent_fence f WHERE f.resource = NEW.resource;
    IF NEW.holder IS NOT NULL AND NEW.token <= v_fence THEN
        RAISE EXCEPTION USING ERRCODE = 'FM006',
            MESSAGE = format('lease guard: a grant of %s issues a token above its fence token %s, not %s',
                             NEW.resource, v_fence, NEW.token);
    END IF;
    v_expected := @extschema@.next_grant_token(greatest(OLD.token, coalesce(v_fence, 0)), v_incarnation);
    IF NEW.holder IS NULL OR NEW.token <> v_expected THEN
        RAISE EXCEPTION USING ERRCODE = 'FM006',
            MESSAGE = format('lease guard: the token counter of %s moves only with a grant to a holder, which '
                             'issues token %s next, not %s', NEW.resource, v_expected, NEW.token);
    END IF;
    IF NEW.replication = 'synchronous' AND current_setting('synchronous_standby_names') = '' THEN
        RAISE EXCEPTION USING ERRCODE = 'FM006',
            MESSAGE = format('lease guard: the grant of %s cannot be synchronous: the server has no synchronous '
                             'standby', NEW.resource);
    END IF;
    RETURN NEW;
END
$$;

CREATE TRIGGER lease_no_forged_grant
    BEFORE INSERT OR UPDATE ON @extschema@.lease
    FOR EACH ROW EXECUTE FUNCTION @extschema@.lease_grant_guard();

-- One row per resource the Redis backend has ever granted: token is the last token Redis issued
-- for it, as its grant recorded it (advance_fence(), in the grant's transaction, before it advances
-- the fence). The database cannot read Redis's counter, so it keeps this record of it: a fence
-- whose tokens come from Redis never goes above it (agent_fence_source_guard()). It only goes up
-- (redis_grant_guard()); granted_at is the database's clock at that grant. No holder: the grant's
-- GRANT event names it. Written only by advance_fence() (the migration role may read it, see Two
-- roles).
CREATE TABLE @extschema@.redis_grant (
    resource   text        PRIMARY KEY
               CHECK (resource <> '' AND length(resource) <= 255),
    token      bigint      NOT NULL CHECK (token > 0),
    granted_at timestamptz NOT NULL DEFAULT now()
);
COMMENT ON TABLE @extschema@.redis_grant IS
    'The last token Redis issued per resource, recorded by its grant: a Redis-sourced fence stays at or below it.';
-- The token domain of agent_fence, NOT VALID for the same reason: a row already out of range stays
-- readable, and every new or changed row is checked.
ALTER TABLE @extschema@.redis_grant
    ADD CONSTRAINT redis_grant_token_domain CHECK (token <= 4611686018427387904) NOT VALID;

-- The recorded grants are monotonic, like the lease token counter (SQLSTATE FM002).
CREATE FUNCTION @extschema@.redis_grant_guard() RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF TG_OP = 'UPDATE' AND NEW.resource = OLD.resource AND NEW.token >= OLD.token THEN
        RETURN NEW;
    END IF;
    RAISE EXCEPTION USING ERRCODE = 'FM002',
        MESSAGE = format('redis_grant is monotonic: %s of the recorded grant of %s is not allowed',
                         CASE WHEN TG_OP = 'UPDATE' THEN 'lowering or renaming' ELSE lower(TG_OP) END,
                         coalesce(OLD.resource, '(all)'));
END
$$;

CREATE TRIGGER redis_grant_monotonic
    BEFORE UPDATE OR DELETE ON @extschema@.redis_grant
    FOR EACH ROW EXECUTE FUNCTION @extschema@.redis_grant_guard();

CREATE TRIGGER redis_grant_no_truncate
    BEFORE TRUNCATE ON @extschema@.redis_grant
    FOR EACH STATEMENT EXECUTE FUNCTION @extschema@.redis_grant_guard();

-- agent_fence: while a resource takes its tokens from the built-in lease service, its fence token
-- is at most the last token that service issued (the lease row's token: a grant writes the lease
-- row first, then advances the fence to it), and it leaves the service (lease detach, or a grant
-- by the Redis backend) only while no lease on it is live. The incarnation is a grant's to write,
-- as the one the database is on now, with the token the grant issued: a rewritten incarnation
-- would make a copy of the database (or a promoted standby) issue tokens again that were issued
-- here. updated_at moves with the token only. A fence whose tokens come from Redis is never
-- raised, or moved to Redis, above the last token a Redis grant recorded (redis_grant; none
-- recorded: 0), whoever writes, the owner included: a grant records its token before it advances
-- the fence, so only a token Redis never issued is refused. With two roles only the owner raises
-- such a fence at all, through a grant's advance_fence(). The owner may insert a fence row as it
-- was, above the record too: a restore's COPY loads agent_fence before redis_grant (see Dump and
-- restore), and a fence row is inserted once (a grant of a live Redis lease has written its row
-- already). With one role the owner can still raise the record and then the fence, as it can the
-- lease row: check --db reports a token no GRANT event names (FM413).
CREATE FUNCTION @extschema@.agent_fence_source_guard() RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_issued  bigint;
    v_holder  text;
    v_expires timestamptz;
    v_granted bigint;
BEGIN
    -- The owner may insert a fence row as it was (a restore's COPY keeps the old incarnation, so the
    -- restored database's next grant moves to a new epoch: see Dump and restore).
    IF ((TG_OP = 'INSERT' AND NEW.incarnation IS NOT NULL
         AND NOT pg_has_role(current_user, (SELECT c.relowner FROM pg_class c WHERE c.oid = TG_RELID), 'USAGE'))
        OR (TG_OP = 'UPDATE' AND NEW.incarnation IS DISTINCT FROM OLD.incarnation))
       AND (NEW.token_source = 'external' OR (TG_OP = 'UPDATE' AND NEW.token <= OLD.token)
            OR split_part(NEW.incarnation, '+', 1) IS DISTINCT FROM
               (SELECT i.incarnation FROM @extschema@.database_incarnation() i)) THEN
        RAISE EXCEPTION USING ERRCODE = 'FM006',
            MESSAGE = format('lease guard: the incarnation of %s is written by a grant only, with the token it '
                             'issued, as the incarnation the database is on now', NEW.resource);
    END IF;
    IF NEW.token_source = 'redis' AND (TG_OP = 'INSERT' OR NEW.token > OLD.token OR OLD.token_source <> 'redis') THEN
        IF NOT pg_has_role(current_user, (SELECT c.relowner FROM pg_class c WHERE c.oid = TG_RELID), 'USAGE') THEN
            RAISE EXCEPTION USING ERRCODE = 'FM006',
                MESSAGE = format('lease guard: the fence of %s takes its tokens from Redis: only a Redis grant raises '
                                 'it (advance_fence()), to the token it issued', NEW.resource);
        END IF;
        IF TG_OP = 'UPDATE' THEN
            SELECT g.token INTO v_granted FROM @extschema@.redis_grant g WHERE g.resource = NEW.resource;
            IF NEW.token > coalesce(v_granted, 0) THEN
                RAISE EXCEPTION USING ERRCODE = 'FM006',
                    MESSAGE = format('lease guard: this fence token is above the last token Redis issued (recorded '
                                     'by its grant): it was never issued (fence token %s of %s, the last token '
                                     'recorded %s)', NEW.token, NEW.resource, coalesce(v_granted, 0));
            END IF;
        END IF;
    END IF;
    IF TG_OP = 'UPDATE' AND NEW.token = OLD.token AND NEW.updated_at IS DISTINCT FROM OLD.updated_at THEN
        RAISE EXCEPTION USING ERRCODE = 'FM006',
            MESSAGE = format('lease guard: updated_at of %s moves with its token only', NEW.resource);
    END IF;
    IF TG_OP = 'UPDATE' AND NEW.token = OLD.token AND NEW.token_source = OLD.token_source THEN
        RETURN NEW;
    END IF;
    IF NEW.token_source <> 'lease service' AND (TG_OP = 'INSERT' OR OLD.token_source <> 'lease service') THEN
        RETURN NEW;  -- an external claim, a Redis grant: not the lease service's
    END IF;
    SELECT l.token, l.holder, l.expires_at INTO v_issued, v_holder, v_expires
      FROM @extschema@.lease l WHERE l.resource = NEW.resource;
    IF NEW.token_source = 'lease service' AND NEW.token > coalesce(v_issued, 0) THEN
        RAISE EXCEPTION USING ERRCODE = 'FM006',
            MESSAGE = format('lease guard: fence token %s of %s is above the last token the lease service issued '
                             '(%s): it was never issued', NEW.token, NEW.resource, coalesce(v_issued, 0));
    END IF;
    IF NEW.token_source <> 'lease service' AND v_holder IS NOT NULL AND v_expires > clock_timestamp() THEN
        RAISE EXCEPTION USING ERRCODE = 'FM006',
            MESSAGE = format('lease guard: the lease of %s is held by %s (token %s) until %s: its fence cannot leave '
                             'the lease service while that lease is live', NEW.resource, v_holder, v_issued, v_expires);
    END IF;
    RETURN NEW;
END
$$;

-- A grant's fence advance, in its transaction (grant_fence in queries/postgresql.sql and
-- the seed_granted_fence statement): p_resource moves up to p_token, just issued by the lease service
-- p_source on the database's p_incarnation, and takes its tokens from that service from now on; its
-- row is seeded when it has none. True when the fence moved or was seeded; false when a token at or
-- above p_token has written (the caller then rolls the grant back). A Redis grant first records
-- p_token in redis_grant (raised, never lowered), the last token Redis issued, which such a fence
-- may not pass (see agent_fence_source_guard()). It runs as the owner of the fence, the only role
-- that writes redis_grant and raises a fence whose tokens come from Redis.
CREATE FUNCTION @extschema@.advance_fence(p_resource text, p_token bigint, p_source text, p_incarnation text)
RETURNS boolean
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF p_source = 'redis' THEN
        INSERT INTO @extschema@.redis_grant AS g (resource, token) VALUES (p_resource, p_token)
        ON CONFLICT (resource) DO UPDATE SET token = excluded.token, granted_at = excluded.granted_at
         WHERE g.token < excluded.token;
    END IF;
    UPDATE @extschema@.agent_fence
       SET token = p_token, token_source = p_source, incarnation = p_incarnation, updated_at = now()
     WHERE resource = p_resource AND token < p_token;
    IF FOUND THEN
        RETURN true;
    END IF;
    INSERT INTO @extschema@.agent_fence (resource, token, token_source, incarnation)
    VALUES (p_resource, p_token, p_source, p_incarnation)
    ON CONFLICT (resource) DO NOTHING;
    RETURN FOUND;
END
$$;

CREATE TRIGGER agent_fence_no_unissued_token
    BEFORE INSERT OR UPDATE ON @extschema@.agent_fence
    FOR EACH ROW EXECUTE FUNCTION @extschema@.agent_fence_source_guard();

-- fence_event: the role that runs migrations has no INSERT on it (see grant_to_migration_role());
-- every event goes in through the owner's functions: record_apply(), record_rollback(),
-- record_steps(), claim_and_record(), and log_event() for the lease service's and the runner's
-- events. log_event() writes a GRANT event only in the transaction of the grant it names: the
-- lease row granted to its holder with its token since the transaction began (granted_at, which
-- only a grant sets), or for a Redis grant the fence row advanced to its token in this transaction
-- (updated_at, which moves with the token only). A check in the function, not a trigger on the
-- table: a row trigger on fence_event would cost every revision's APPLY event.
CREATE FUNCTION @extschema@.log_event(
    p_at timestamptz, p_resource text, p_kind text, p_holder text, p_token bigint, p_revision text, p_detail text
) RETURNS void
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF p_kind = 'GRANT'
       AND NOT EXISTS (SELECT 1 FROM @extschema@.lease l
                        WHERE l.resource = p_resource AND l.token = p_token AND l.holder = p_holder
                          AND l.granted_at >= now())
       AND NOT EXISTS (SELECT 1 FROM @extschema@.agent_fence f
                        WHERE f.resource = p_resource AND f.token = p_token AND f.token_source = 'redis'
                          AND f.updated_at >= now()) THEN
        RAISE EXCEPTION USING ERRCODE = 'FM006',
            MESSAGE = format('lease guard: no grant of token %s of %s to %s was made in this transaction: only a '
                             'grant writes its GRANT event', p_token, p_resource, p_holder);
    END IF;
    INSERT INTO @extschema@.fence_event (at, resource, kind, holder, token, revision, detail)
    VALUES (coalesce(p_at, clock_timestamp()), p_resource, p_kind, p_holder, p_token, p_revision, p_detail);
END
$$;


-- == Pre-check mode's named lock ==

-- Held by a writer on its own session for its whole run (session advisory locks survive its
-- commits and go with its connection):
--   * classid 1718503790, objid the resource's lock key, exclusive: pre-check writers never overlap;
--   * classid 1718503789 (the claim lock, see claim()), shared: a lease grant, which takes that
--     lock exclusively, waits for the writer or, with --preempt, finds it in pg_locks and ends it.
-- Waits at most p_timeout_ms; false when the lock was not free by then.
CREATE FUNCTION @extschema@.named_lock(p_resource text, p_timeout_ms bigint) RETURNS boolean
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    deadline timestamptz := clock_timestamp() + p_timeout_ms * interval '1 millisecond';
    v_key    integer := @extschema@.lock_key(p_resource);  -- given by the run's claim
BEGIN
    LOOP
        IF pg_try_advisory_lock(1718503790, v_key) THEN
            IF pg_try_advisory_lock_shared(1718503789, v_key) THEN
                RETURN true;
            END IF;
            PERFORM pg_advisory_unlock(1718503790, v_key);
        END IF;
        IF clock_timestamp() >= deadline THEN
            RETURN false;
        END IF;
        PERFORM pg_sleep(0.02);
    END LOOP;
END
$$;

-- Releasing it also ends the session's proof of its claim (see claim()): it runs as the owner of
-- the fence, whose temporary table that is.
CREATE FUNCTION @extschema@.named_lock_release(p_resource text) RETURNS boolean
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_key integer := @extschema@.lock_key(p_resource);
BEGIN
    IF (SELECT c.relowner FROM pg_class c WHERE c.oid = to_regclass('pg_temp.fencemigrate_session_claim'))
       = current_user::regrole THEN
        DROP TABLE pg_temp.fencemigrate_session_claim;
    END IF;
    PERFORM pg_advisory_unlock_shared(1718503789, v_key);
    RETURN pg_advisory_unlock(1718503790, v_key);
END
$$;


-- == Two roles: the fence owned by a role that does not migrate ==

-- The role that owns the fence tables can switch their guard triggers off (ALTER TABLE ...
-- DISABLE TRIGGER), so the role that runs migrations should not own them. `fencemigrate install
-- --grant-to ROLE`, run by the owner, calls grant_to_migration_role(ROLE): ROLE can then run every
-- fencemigrate command, but cannot alter, disable, drop or truncate anything of the fence. It gets
-- SELECT on every table, EXECUTE on every function, and only the writes the runner makes itself:
--   * agent_fence, lease: INSERT and UPDATE (the first claim and grant seed a row; a claim locks
--     and raises it; a grant, renew or release writes them); the guard triggers, which ROLE cannot
--     disable, refuse lowering a token, renaming, DELETE, and every write no grant, renew, release,
--     detach or claim makes (the lease guard); TRUNCATE is not granted;
--   * applied_revision: INSERT, UPDATE, DELETE (the ledger: upgrades, rollbacks, pre-check marks,
--     resolve); a row written above the fence is reported by check --db (FM411);
--   * fence_event: nothing: the owner's functions write every event (log_event(), record_apply()
--     and the others run as the owner), so the log is append-only for ROLE and a GRANT event goes
--     in only in its grant's transaction (undo_record() takes back its own transaction's APPLY
--     event as the owner);
--   * claim_proof: SELECT only: claim() writes the proof of a claim as the owner, so ROLE cannot
--     write the version table without claiming;
--   * redis_grant: SELECT only: a Redis grant's advance_fence() records its token as the owner, so
--     ROLE cannot raise what a fence whose tokens come from Redis is held to;
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
    EXECUTE format('GRANT INSERT, DELETE ON @extschema@.pending_version_check TO %I', p_role);
    EXECUTE format('GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA @extschema@ TO %I', p_role);
END
$$;


-- == Writes without a token ==

-- Once a database is fenced, Alembic's version table refuses every write from a transaction that
-- has not claimed the fence: plain `alembic upgrade`, `downgrade` or `stamp` on a fenced database
-- fails, and PostgreSQL rolls the revision's DDL back with it. A version-table write is allowed
-- after a claim in the same transaction (this backend's row of claim_proof names the transaction:
-- one index lookup), or in a pre-check session that claimed under pre-check mode's named lock and
-- still holds the claim lock (1718503789) for its session, across that mode's commits (the owner's
-- temporary table fencemigrate_session_claim, and pg_locks, read only when the row does not
-- match). Only claim() and claim_and_record(), running as the owner of the fence, write either
-- proof: with two roles (install --grant-to) the migration role cannot forge one, by a setting,
-- an advisory lock or a row; the owner itself can (it owns the table and the trigger). The guard
-- reads them as the owner (SECURITY DEFINER): every role that writes the version table is checked,
-- whether or not it may read claim_proof.
-- A write the guard lets through is also the proof claim_and_record's COMMIT check waits for: the
-- guard notes it in the transaction-local setting fencemigrate.version_written (transaction id and
-- table), so check_version_row() has nothing to search for. guard_version_table() puts the
-- guard trigger on a version table (once it exists); allow_tokenless_writes() takes it off and
-- records the opt-out, which every later run respects.
CREATE TABLE @extschema@.claim_proof (
    pid  integer PRIMARY KEY,
    xact bigint  NOT NULL
);
COMMENT ON TABLE @extschema@.claim_proof IS
    'Per backend, the transaction of its last claim (written by claim() only): the version table guard''s proof.';

CREATE TABLE @extschema@.tokenless_writes_allowed (
    version_table text        PRIMARY KEY,
    allowed_at    timestamptz NOT NULL DEFAULT now()
);
COMMENT ON TABLE @extschema@.tokenless_writes_allowed IS
    'Version tables whose guard was removed on purpose (fencemigrate install --allow-tokenless-writes).';

CREATE FUNCTION @extschema@.refuse_tokenless_write() RETURNS trigger
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF (SELECT p.xact FROM @extschema@.claim_proof p WHERE p.pid = pg_backend_pid())
           IS DISTINCT FROM pg_current_xact_id()::text::bigint
       AND NOT (EXISTS (SELECT 1 FROM pg_class c
                         WHERE c.oid = to_regclass('pg_temp.fencemigrate_session_claim')
                           AND c.relowner = (SELECT f.proowner FROM pg_proc f
                                              WHERE f.oid = '@extschema@.claim(text,bigint)'::regprocedure))
                AND EXISTS (SELECT 1 FROM pg_locks l
                             WHERE l.locktype = 'advisory' AND l.classid = 1718503789 AND l.objsubid = 2
                               AND l.pid = pg_backend_pid() AND l.granted)) THEN
        RAISE EXCEPTION USING
            ERRCODE = 'FM005',
            MESSAGE = format('fencemigrate refused this %s on the Alembic version table %s.%s: the transaction '
                             'carries no fencing token (it never claimed the fence), so nothing was applied. '
                             'Migrate this database with fencemigrate (upgrade, downgrade, stamp: with --token N, '
                             'or let it take a lease), not with plain alembic; to allow tokenless writes on purpose, '
                             'run `fencemigrate install --allow-tokenless-writes`.',
                             lower(TG_OP), TG_TABLE_SCHEMA, TG_TABLE_NAME);
    END IF;
    IF TG_OP IN ('INSERT', 'UPDATE') THEN
        PERFORM set_config('fencemigrate.version_written', format('%s/%s', pg_current_xact_id(), TG_RELID), true);
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


-- == Dump and restore ==

-- Created by CREATE EXTENSION, the fence tables are the extension's, which pg_dump leaves out
-- unless they are marked as configuration: a restore would start every token again at 1, and a
-- stale holder would write. Marked, their rows are dumped (pending_version_check holds nothing
-- between transactions; the event log's identity sequence goes with it), and a restore loads
-- them into the tables CREATE EXTENSION has just made, guards on: lease before agent_fence (the
-- foreign key on agent_fence.leased orders pg_dump's COPY), and agent_fence before redis_grant
-- (pg_dump's order by name), which the guards accept: the owner inserts each fence row as it was
-- (see agent_fence_source_guard()), and the recorded Redis grants hold those fences again once
-- redis_grant's rows are in. A restore into another database or cluster is a new incarnation, so
-- the next grant moves to a new epoch (see agent_fence.incarnation). Installed by the runner, the
-- tables are ordinary ones that pg_dump dumps anyway: nothing to mark.
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_depend d
                WHERE d.classid = 'pg_class'::regclass AND d.objid = '@extschema@.agent_fence'::regclass
                  AND d.deptype = 'e') THEN
        PERFORM pg_extension_config_dump('@extschema@.agent_fence', '');
        PERFORM pg_extension_config_dump('@extschema@.lease', '');
        PERFORM pg_extension_config_dump('@extschema@.applied_revision', '');
        PERFORM pg_extension_config_dump('@extschema@.fence_event', '');
        PERFORM pg_extension_config_dump('@extschema@.fence_event_id_seq', '');
        PERFORM pg_extension_config_dump('@extschema@.tokenless_writes_allowed', '');
        PERFORM pg_extension_config_dump('@extschema@.resource_lock_key', '');
        PERFORM pg_extension_config_dump('@extschema@.redis_grant', '');
    END IF;
END
$$;
