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

CREATE OR REPLACE FUNCTION @extschema@.claim(p_resource text, p_token bigint) RETURNS bigint
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_xact bigint;
BEGIN
    PERFORM pg_advisory_xact_lock_shared(1718503789, @extschema@.resource_key(p_resource));
    v_xact := @extschema@.claim_fence_row(p_resource, p_token);
    PERFORM set_config('fencemigrate.claimed_xact', v_xact::text, true);
    RETURN v_xact;
END
$$;

CREATE OR REPLACE FUNCTION @extschema@.claim_and_record(
    p_resource text, p_token bigint, p_version_table text, p_version_regclass regclass,
    p_revision text, p_holder text, p_script_sha256 text, p_source text DEFAULT NULL
) RETURNS bigint
LANGUAGE plpgsql
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
    PERFORM set_config('fencemigrate.claimed_xact', v_xact::text, true);
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

CREATE OR REPLACE FUNCTION @extschema@.named_lock_release(p_resource text) RETURNS boolean
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_key integer := @extschema@.lock_key(p_resource);
BEGIN
    PERFORM pg_advisory_unlock_shared(1718503789, v_key);
    RETURN pg_advisory_unlock(1718503790, v_key);
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
