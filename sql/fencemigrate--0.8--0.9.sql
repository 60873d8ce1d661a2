-- fencemigrate 0.8 -> 0.9: one revision per transaction costs less.
--
-- ALTER EXTENSION fencemigrate UPDATE TO '0.9' runs this file; the runner applies it itself
-- to a database at 0.8 (a fresh install runs the current version's full script instead).
\echo Use "ALTER EXTENSION fencemigrate UPDATE TO '0.9'" to load this file. \quit

CREATE OR REPLACE FUNCTION @extschema@.schema_version() RETURNS text
LANGUAGE sql IMMUTABLE
AS $$ SELECT '0.9'::text $$;

-- claim_and_record(), run once before each revision's DDL with transaction_per_migration=True,
-- claims and records in its own body instead of through claim(), claim_fence_row() (unless the
-- token changes or the resource is new), record_apply() and write_ledger_row(): the same rows,
-- locks and setting, with one function call instead of five.
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
    PERFORM pg_advisory_xact_lock_shared(1718503789, hashtext(p_resource));
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

-- The version table's guard notes a write it lets through in the transaction-local setting
-- fencemigrate.version_written (transaction id and table) instead of deleting the pending COMMIT
-- checks of the table (a scan of pending_version_check); the COMMIT check reads the note, and
-- deletes its own pending row.
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
        PERFORM set_config('fencemigrate.version_written', format('%s/%s', pg_current_xact_id(), TG_RELID), true);
    END IF;
    RETURN NULL;
END
$$;

CREATE OR REPLACE FUNCTION @extschema@.check_version_row() RETURNS trigger
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
