-- fencemigrate 0.3 -> 0.4: a hardened fence (issue 12).
--
-- ALTER EXTENSION fencemigrate UPDATE TO '0.4' runs this file; the runner applies it itself
-- after the earlier scripts (fresh installs) or on its own (databases at 0.3).
\echo Use "ALTER EXTENSION fencemigrate UPDATE TO '0.4'" to load this file. \quit

CREATE OR REPLACE FUNCTION @extschema@.schema_version() RETURNS text
LANGUAGE sql IMMUTABLE
AS $$ SELECT '0.4'::text $$;

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
