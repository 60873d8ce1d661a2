-- fencemigrate 0.6 -> 0.7: a transaction per revision costs less on the server.
--
-- ALTER EXTENSION fencemigrate UPDATE TO '0.7' runs this file; the runner applies it itself
-- to a database at 0.6 (a fresh install runs the current version's full script instead).
\echo Use "ALTER EXTENSION fencemigrate UPDATE TO '0.7'" to load this file. \quit

CREATE OR REPLACE FUNCTION @extschema@.schema_version() RETURNS text
LANGUAGE sql IMMUTABLE
AS $$ SELECT '0.7'::text $$;

-- A claim also notes its transaction in the setting fencemigrate.claimed_xact, local to the
-- transaction (gone at its end, and with a savepoint rolled back to before it). The version
-- table's guard reads it instead of scanning pg_locks, which copies the whole lock table on
-- every write of Alembic's version row; pg_locks stays the fallback for pre-check mode's named
-- lock, a session lock held across that mode's commits. Neither proof stops a session that forges
-- it on purpose (any role can take an advisory lock or set a setting): the guard is there for
-- writers that never claimed, plain `alembic` among them; forged tokens are the fence's job.
CREATE OR REPLACE FUNCTION @extschema@.claim(p_resource text, p_token bigint) RETURNS bigint
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_xact bigint;
BEGIN
    PERFORM pg_advisory_xact_lock_shared(1718503789, hashtext(p_resource));
    v_xact := @extschema@.claim_fence_row(p_resource, p_token);
    PERFORM set_config('fencemigrate.claimed_xact', v_xact::text, true);
    RETURN v_xact;
END
$$;

-- The version table's guard. When it lets a write of the version row through, that write is
-- also the proof claim_and_record's check at COMMIT waits for: the pending check is dropped here,
-- so the deferred trigger (check_version_row) finds nothing left to prove and does not search the
-- version table. A version table without this guard (tokenless writes allowed) is still proved at
-- COMMIT as before.
CREATE OR REPLACE FUNCTION @extschema@.refuse_tokenless_write() RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF current_setting('fencemigrate.claimed_xact', true) IS DISTINCT FROM pg_current_xact_id()::text
       AND NOT EXISTS (SELECT 1 FROM pg_locks l
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
    IF TG_OP IN ('INSERT', 'UPDATE') THEN
        DELETE FROM @extschema@.pending_version_check WHERE version_table = TG_RELID::regclass;
    END IF;
    RETURN NULL;
END
$$;
