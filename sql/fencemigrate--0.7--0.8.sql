-- fencemigrate 0.7 -> 0.8: the ledger keeps the text of every revision file it records.
--
-- ALTER EXTENSION fencemigrate UPDATE TO '0.8' runs this file; the runner applies it itself
-- to a database at 0.7 (a fresh install runs the current version's full script instead).
\echo Use "ALTER EXTENSION fencemigrate UPDATE TO '0.8'" to load this file. \quit

CREATE OR REPLACE FUNCTION @extschema@.schema_version() RETURNS text
LANGUAGE sql IMMUTABLE
AS $$ SELECT '0.8'::text $$;

-- applied_revision.source: the text of the revision file, as the run that wrote the row read it
-- (the same bytes its script_sha256 was computed from, decoded as UTF-8). NULL for rows written
-- before 0.8 ("source not recorded"), and for a file that is not UTF-8 text.
-- Compression: PostgreSQL compresses a text value of more than about 2 kB by itself when it
-- stores it (TOAST), and reads the column only when a query names it, so the ledger's other
-- readers never pay for it. It uses lz4 where the server was built with it (faster than the
-- default pglz at a similar ratio on source code), pglz otherwise.
ALTER TABLE @extschema@.applied_revision ADD COLUMN source text;
COMMENT ON COLUMN @extschema@.applied_revision.source IS
    'The revision file''s text as applied (UTF-8; NULL: not recorded, written before fence schema 0.8).';
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_settings
                WHERE name = 'default_toast_compression' AND 'lz4' = ANY (enumvals)) THEN
        ALTER TABLE @extschema@.applied_revision ALTER COLUMN source SET COMPRESSION lz4;
    END IF;
END
$$;

-- The ledger functions take the text beside the sha256, in the call the runner already makes
-- (no extra round trip). The new parameters default to NULL, so a call written for 0.7 (an
-- older --sql script) still runs and records no text.
DROP FUNCTION @extschema@.claim_and_record(text, bigint, text, regclass, text, text, text);
DROP FUNCTION @extschema@.record_steps(text, text, bigint, text, text[], text[], text[], text[]);
DROP FUNCTION @extschema@.record_apply(text, text, text, bigint, text, text, text);
DROP FUNCTION @extschema@.write_ledger_row(text, text, text, bigint, text, text, text);

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

CREATE FUNCTION @extschema@.record_apply(
    p_version_table text, p_revision text, p_resource text, p_token bigint,
    p_holder text, p_method text, p_script_sha256 text, p_source text DEFAULT NULL
) RETURNS void
LANGUAGE plpgsql
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

CREATE FUNCTION @extschema@.record_steps(
    p_version_table text, p_resource text, p_token bigint, p_holder text,
    p_actions text[], p_revisions text[], p_methods text[], p_shas text[], p_sources text[] DEFAULT NULL
) RETURNS bigint
LANGUAGE plpgsql
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

CREATE FUNCTION @extschema@.claim_and_record(
    p_resource text, p_token bigint, p_version_table text, p_version_regclass regclass,
    p_revision text, p_holder text, p_script_sha256 text, p_source text DEFAULT NULL
) RETURNS bigint
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM @extschema@.claim(p_resource, p_token);
    PERFORM @extschema@.record_apply(p_version_table, p_revision, p_resource, p_token,
                                     p_holder, 'upgrade', p_script_sha256, p_source);
    INSERT INTO @extschema@.pending_version_check (version_table, revision, resource, token)
    VALUES (p_version_regclass, p_revision, p_resource, p_token);
    RETURN pg_current_xact_id()::text::bigint;
END
$$;
