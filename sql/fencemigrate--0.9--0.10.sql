-- fencemigrate 0.9 -> 0.10: hardening, round two (issue 24).
--
-- ALTER EXTENSION fencemigrate UPDATE TO '0.10' runs this file; the runner applies it itself
-- to a database at 0.9 (a fresh install runs the current version's full script instead).
\echo Use "ALTER EXTENSION fencemigrate UPDATE TO '0.10'" to load this file. \quit

CREATE OR REPLACE FUNCTION @extschema@.schema_version() RETURNS text
LANGUAGE sql IMMUTABLE
AS $$ SELECT '0.10'::text $$;

-- == a: advisory locks keyed by a collision-free id per resource (issue 24, 8(a)) ==
-- The claim lock and pre-check mode's named lock were keyed by hashtext(resource), which two
-- resources can share: each resource now gets a key of its own (see the full script).
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

-- Resources already known get their keys now, in name order: the first of two names that share a
-- hash keeps it (the key older runs took), the second gets the next free one.
SELECT @extschema@.register_lock_key(r.resource)
  FROM (SELECT resource FROM @extschema@.agent_fence UNION SELECT resource FROM @extschema@.lease) r
 ORDER BY r.resource;

-- A migration role granted before 0.10 reads the keys (claim() looks its key up as that role).
DO $$
DECLARE
    v_role regrole;
BEGIN
    FOR v_role IN SELECT a.grantee::regrole
                    FROM pg_class c, aclexplode(c.relacl) a
                   WHERE c.oid = '@extschema@.agent_fence'::regclass AND a.privilege_type = 'SELECT'
                     AND a.grantee <> c.relowner AND a.grantee <> 0 LOOP
        EXECUTE format('GRANT SELECT ON @extschema@.resource_lock_key TO %s', v_role);
    END LOOP;
END
$$;

CREATE OR REPLACE FUNCTION @extschema@.named_lock(p_resource text, p_timeout_ms bigint) RETURNS boolean
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

-- == e: the extension's tables in pg_dump (issue 24, 8(e)) ==

-- leased: the resource, while its tokens come from the built-in lease service (NULL otherwise),
-- which then has its lease row: a foreign key, NOT VALID as the token domain checks are. It says
-- what the lease guards hold to anyway, and gives pg_dump the order in which a restore's COPY must
-- load the two tables for the guards to accept it (see Dump and restore).
ALTER TABLE @extschema@.agent_fence
    ADD COLUMN leased text GENERATED ALWAYS AS (CASE WHEN token_source = 'lease service' THEN resource END) STORED;
ALTER TABLE @extschema@.agent_fence
    ADD CONSTRAINT agent_fence_leased_fkey FOREIGN KEY (leased) REFERENCES @extschema@.lease (resource) NOT VALID;

-- Created by CREATE EXTENSION, the fence tables are the extension's, which pg_dump leaves out
-- unless they are marked as configuration: a restore would start every token again at 1, and a
-- stale holder would write. Marked, their rows are dumped (pending_version_check holds nothing
-- between transactions; the event log's identity sequence goes with it), and a restore loads
-- them into the tables CREATE EXTENSION has just made, guards on: lease before agent_fence (the
-- foreign key on agent_fence.leased orders pg_dump's COPY), which the guards accept. A restore
-- into another database or cluster is a new incarnation, so the next grant moves to a new epoch
-- (see agent_fence.incarnation). Installed by the runner, the tables are ordinary ones that
-- pg_dump dumps anyway: nothing to mark.
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
    END IF;
END
$$;


-- == B1: a grant only as a grant makes it; a claim proved by the owner's row (issue 24: 3, 4, 6, 8(d)) ==

-- The lease guard accepts only what a grant, renew or release writes: the next token (or the epoch
-- jump the grant computes), an expiry within the longest TTL, an incarnation and a replication
-- written by a grant only, and a GRANT event only from the grant's own transaction (see the full
-- script, Leases and their guards).
CREATE FUNCTION @extschema@.database_incarnation(OUT incarnation text, OUT timeline bigint)
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT format('%s/%s/%s', (pg_control_system()).system_identifier, t.timeline,
                  (SELECT d.oid FROM pg_database d WHERE d.datname = current_database())),
           t.timeline
      FROM (SELECT ('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::bigint AS timeline) t
$$;

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

CREATE OR REPLACE FUNCTION @extschema@.lease_grant_guard() RETURNS trigger
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

CREATE OR REPLACE FUNCTION @extschema@.agent_fence_source_guard() RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_issued  bigint;
    v_holder  text;
    v_expires timestamptz;
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
    IF NEW.token_source = 'redis' AND (TG_OP = 'INSERT' OR NEW.token > OLD.token OR OLD.token_source <> 'redis')
       AND NOT pg_has_role(current_user, (SELECT c.relowner FROM pg_class c WHERE c.oid = TG_RELID), 'USAGE') THEN
        RAISE EXCEPTION USING ERRCODE = 'FM006',
            MESSAGE = format('lease guard: the fence of %s takes its tokens from Redis: only a Redis grant raises it '
                             '(advance_fence()), to the token it issued', NEW.resource);
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

-- Every event goes in through the owner's log_event() (see the full script, Leases and their guards).
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

-- The version table's guard recognises a claim by the proof claim() and claim_and_record() write as
-- the owner of the fence (claim_proof, and pre-check's session table), no longer by the setting
-- fencemigrate.claimed_xact or an advisory lock alone, which any role can make (see the full
-- script, Writes without a token).
CREATE TABLE @extschema@.claim_proof (
    pid  integer PRIMARY KEY,
    xact bigint  NOT NULL
);
COMMENT ON TABLE @extschema@.claim_proof IS
    'Per backend, the transaction of its last claim (written by claim() only): the version table guard''s proof.';

CREATE OR REPLACE FUNCTION @extschema@.claim(p_resource text, p_token bigint) RETURNS bigint
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

CREATE OR REPLACE FUNCTION @extschema@.claim_and_record(
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

CREATE OR REPLACE FUNCTION @extschema@.named_lock_release(p_resource text) RETURNS boolean
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

CREATE OR REPLACE FUNCTION @extschema@.refuse_tokenless_write() RETURNS trigger
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

-- The event log is the owner's to write: the ledger functions run as the owner, and the
-- migration role loses INSERT on fence_event (see log_event()).

CREATE OR REPLACE FUNCTION @extschema@.record_apply(
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

CREATE OR REPLACE FUNCTION @extschema@.record_rollback(
    p_version_table text, p_revision text, p_resource text, p_token bigint, p_holder text
) RETURNS void
LANGUAGE plpgsql
SECURITY DEFINER
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
    p_actions text[], p_revisions text[], p_methods text[], p_shas text[], p_sources text[] DEFAULT NULL
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
                                                p_token, p_holder);
        END IF;
    END LOOP;
    RETURN pg_current_xact_id()::text::bigint;
END
$$;

CREATE OR REPLACE FUNCTION @extschema@.grant_to_migration_role(p_role text) RETURNS void
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

-- A Redis-sourced fence is raised only by a grant's advance_fence() (issue 24: 6).
CREATE FUNCTION @extschema@.advance_fence(p_resource text, p_token bigint, p_source text, p_incarnation text)
RETURNS boolean
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
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
