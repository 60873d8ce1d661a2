-- fencemigrate 0.2 -> 0.3: pre-check mode (dirty revisions, the named lock) and `resolve`.
--
-- ALTER EXTENSION fencemigrate UPDATE TO '0.3' runs this file; the runner applies it itself
-- to a database at 0.2 (a fresh install runs the current version's full script instead).
\echo Use "ALTER EXTENSION fencemigrate UPDATE TO '0.3'" to load this file. \quit

CREATE OR REPLACE FUNCTION @extschema@.schema_version() RETURNS text
LANGUAGE sql IMMUTABLE
AS $$ SELECT '0.3'::text $$;

-- Pre-check mode (--mode precheck) cannot claim the fence in the transaction of a revision that
-- runs outside one, so it writes the revision's ledger row before the DDL, marked 'applying'
-- ('rolling_back' for a downgrade), commits that, and settles the row with Alembic's version row
-- afterwards. A row left unsettled is a dirty revision: fenced writes to its resource are refused
-- until `fencemigrate resolve` settles it. state_token / state_holder / state_since: the run that
-- started it.
ALTER TABLE @extschema@.applied_revision
    ADD COLUMN state        text NOT NULL DEFAULT 'applied'
                            CHECK (state IN ('applied', 'applying', 'rolling_back')),
    ADD COLUMN state_token  bigint,
    ADD COLUMN state_holder text,
    ADD COLUMN state_since  timestamptz,
    ADD CONSTRAINT applied_revision_settled CHECK ((state = 'applied') = (state_token IS NULL));
CREATE INDEX applied_revision_unsettled ON @extschema@.applied_revision (resource)
    WHERE state <> 'applied';

-- Writing the ledger row of an applied revision settles a row marked before its DDL.
CREATE OR REPLACE FUNCTION @extschema@.write_ledger_row(
    p_version_table text, p_revision text, p_resource text, p_token bigint,
    p_holder text, p_method text, p_script_sha256 text
) RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF p_method = 'stamp' THEN
        -- A stamp never overwrites the record of a revision that really ran.
        INSERT INTO @extschema@.applied_revision
               (version_table, revision, resource, applied_token, holder, method, script_sha256)
        VALUES (p_version_table, p_revision, p_resource, p_token, p_holder, p_method, p_script_sha256)
        ON CONFLICT (version_table, revision) DO NOTHING;
    ELSE
        INSERT INTO @extschema@.applied_revision AS a
               (version_table, revision, resource, applied_token, holder, method, script_sha256)
        VALUES (p_version_table, p_revision, p_resource, p_token, p_holder, p_method, p_script_sha256)
        ON CONFLICT (version_table, revision) DO UPDATE
            SET resource = excluded.resource, applied_token = excluded.applied_token,
                holder = excluded.holder, method = excluded.method,
                applied_at = now(), script_sha256 = excluded.script_sha256,
                state = 'applied', state_token = NULL, state_holder = NULL, state_since = NULL;
    END IF;
END
$$;

-- Dirty revisions resolved by hand are logged too.
ALTER TABLE @extschema@.fence_event
    DROP CONSTRAINT fence_event_kind_check,
    ADD CONSTRAINT fence_event_kind_check
        CHECK (kind IN ('GRANT', 'RENEW', 'RELEASE', 'EXPIRE', 'PREEMPT', 'LOST', 'APPLY', 'STAMP',
                        'ROLLBACK', 'FENCED', 'RESOLVE'));

-- Pre-check mode's named lock, held by a writer on its own session for its whole run (session
-- advisory locks survive its commits and go with its connection):
--   * classid 1718503790, objid hashtext(resource), exclusive: pre-check writers never overlap;
--   * classid 1718503789 (the claim lock, see claim()), shared: a lease grant, which takes that
--     lock exclusively, waits for the writer or, with --preempt, finds it in pg_locks and ends it.
-- Waits at most p_timeout_ms; false when the lock was not free by then.
CREATE FUNCTION @extschema@.named_lock(p_resource text, p_timeout_ms bigint) RETURNS boolean
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    deadline timestamptz := clock_timestamp() + p_timeout_ms * interval '1 millisecond';
BEGIN
    LOOP
        IF pg_try_advisory_lock(1718503790, hashtext(p_resource)) THEN
            IF pg_try_advisory_lock_shared(1718503789, hashtext(p_resource)) THEN
                RETURN true;
            END IF;
            PERFORM pg_advisory_unlock(1718503790, hashtext(p_resource));
        END IF;
        IF clock_timestamp() >= deadline THEN
            RETURN false;
        END IF;
        PERFORM pg_sleep(0.02);
    END LOOP;
END
$$;

CREATE FUNCTION @extschema@.named_lock_release(p_resource text) RETURNS boolean
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM pg_advisory_unlock_shared(1718503789, hashtext(p_resource));
    RETURN pg_advisory_unlock(1718503790, hashtext(p_resource));
END
$$;
