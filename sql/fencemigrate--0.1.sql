-- fencemigrate 0.1: the fence schema.
--
-- Every object lives in the extension's schema ("fencemigrate" by default). This is the schema
-- as it first shipped: CREATE EXTENSION fencemigrate VERSION '0.1' runs this file, and the update
-- scripts fencemigrate--0.1--0.2.sql ... take it to the current version. A fresh install at the
-- current version runs that version's full script instead (fencemigrate--0.8.sql).
\echo Use "CREATE EXTENSION fencemigrate" to load this file. \quit

-- One row per fenced resource: the highest token that has ever written to it.
CREATE TABLE @extschema@.agent_fence (
    resource   text        PRIMARY KEY
               CHECK (resource <> '' AND length(resource) <= 255),
    token      bigint      NOT NULL CHECK (token > 0),
    updated_at timestamptz NOT NULL DEFAULT now()
);
COMMENT ON TABLE @extschema@.agent_fence IS
    'Highest fencing token seen per resource. Monotonic: see agent_fence_guard().';

-- One row per revision applied (or stamped) by a fenced run, per Alembic version table.
CREATE TABLE @extschema@.applied_revision (
    version_table text        NOT NULL,
    revision      text        NOT NULL,
    resource      text        NOT NULL,
    applied_token bigint      NOT NULL CHECK (applied_token > 0),
    holder        text        NOT NULL,
    method        text        NOT NULL CHECK (method IN ('upgrade', 'stamp')),
    applied_at    timestamptz NOT NULL DEFAULT now(),
    script_sha256 text,
    PRIMARY KEY (version_table, revision)
);
COMMENT ON TABLE @extschema@.applied_revision IS
    'Ledger: which token applied each revision. Re-applying is legal only under that token.';

-- The version of this schema, read by the runner to decide what to install.
CREATE FUNCTION @extschema@.schema_version() RETURNS text
LANGUAGE sql IMMUTABLE
AS $$ SELECT '0.1'::text $$;

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

-- The claim. Run inside the migration's own transaction, before any DDL; it has the effect of
--   UPDATE agent_fence SET token = :t WHERE resource = :r AND token <= :t
-- with 0 rows meaning a higher token has written: FENCED, and the caller's transaction is doomed.
-- The row is locked first and only rewritten when the token goes up, so the usual case (the
-- same token claiming again for its next revision) writes no new row version; the first claim
-- on a resource seeds its row. Either way the row stays locked until the transaction ends.
-- Returns the current transaction id, so the caller can prove its DDL ran in this transaction.
CREATE FUNCTION @extschema@.claim(p_resource text, p_token bigint) RETURNS bigint
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_fence bigint;
BEGIN
    IF p_token IS NULL OR p_token < 1 THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('fencing token must be a positive bigint, got %s', p_token);
    END IF;

    SELECT f.token INTO v_fence FROM @extschema@.agent_fence f WHERE f.resource = p_resource FOR UPDATE;
    IF NOT FOUND THEN
        INSERT INTO @extschema@.agent_fence AS f (resource, token)
        VALUES (p_resource, p_token)
        ON CONFLICT (resource) DO UPDATE
            SET token = excluded.token, updated_at = now()
            WHERE f.token <= excluded.token;
        IF NOT FOUND THEN
            SELECT f.token INTO v_fence FROM @extschema@.agent_fence f WHERE f.resource = p_resource;
        ELSE
            v_fence := p_token;
        END IF;
    ELSIF v_fence < p_token THEN
        UPDATE @extschema@.agent_fence SET token = p_token, updated_at = now() WHERE resource = p_resource;
        v_fence := p_token;
    END IF;

    IF v_fence > p_token THEN
        PERFORM @extschema@.raise_fenced(p_resource, p_token, v_fence,
            format('token %s has since written to %s', v_fence, p_resource));
    END IF;
    RETURN pg_current_xact_id()::text::bigint;
END
$$;

-- Re-applying is legal only for revisions applied under the caller's own token.
-- Called before claim(), so a rejection reports the fence token as committed.
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
BEGIN
    SELECT f.token INTO v_fence FROM @extschema@.agent_fence f WHERE f.resource = p_resource;
    IF v_fence > p_token THEN
        PERFORM @extschema@.raise_fenced(p_resource, p_token, v_fence,
            format('token %s has since written to %s', v_fence, p_resource));
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

-- Ledger bookkeeping, called in the same transaction as the revision's DDL
-- (directly in --sql scripts, through record_steps() and claim_and_record() online).
CREATE FUNCTION @extschema@.record_apply(
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
                applied_at = now(), script_sha256 = excluded.script_sha256;
    END IF;
END
$$;

CREATE FUNCTION @extschema@.record_rollback(p_version_table text, p_revision text) RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    DELETE FROM @extschema@.applied_revision
     WHERE version_table = p_version_table AND revision = p_revision;
END
$$;

-- Several ledger changes in one round trip, in order: p_actions[i] is 'apply' (record_apply
-- with p_methods[i] and p_shas[i]) or 'rollback' (record_rollback). Returns the transaction id,
-- which the caller compares with its claim's to prove that all of it ran in one transaction.
CREATE FUNCTION @extschema@.record_steps(
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
            PERFORM @extschema@.record_rollback(p_version_table, p_revisions[i]);
        END IF;
    END LOOP;
    RETURN pg_current_xact_id()::text::bigint;
END
$$;

-- One revision per transaction (transaction_per_migration): claim, write the ledger row and
-- ask for a check at COMMIT, in one round trip before the revision's DDL. The check, a deferred
-- constraint trigger, proves that Alembic's version row is in this same transaction; a revision
-- that commits behind fencemigrate's back makes its COMMIT fail instead (SQLSTATE FM003).
CREATE TABLE @extschema@.pending_version_check (
    version_table regclass NOT NULL,
    revision      text     NOT NULL,
    resource      text     NOT NULL,
    token         bigint   NOT NULL
);

CREATE FUNCTION @extschema@.claim_and_record(
    p_resource text, p_token bigint, p_version_table text, p_version_regclass regclass,
    p_revision text, p_holder text, p_script_sha256 text
) RETURNS bigint
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM @extschema@.claim(p_resource, p_token);
    PERFORM @extschema@.record_apply(p_version_table, p_revision, p_resource, p_token,
                                     p_holder, 'upgrade', p_script_sha256);
    INSERT INTO @extschema@.pending_version_check (version_table, revision, resource, token)
    VALUES (p_version_regclass, p_revision, p_resource, p_token);
    RETURN pg_current_xact_id()::text::bigint;
END
$$;

-- Take back what claim_and_record wrote, before something commits the transaction early.
CREATE FUNCTION @extschema@.undo_record(p_version_table text, p_revision text) RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    DELETE FROM @extschema@.pending_version_check WHERE revision = p_revision;
    PERFORM @extschema@.record_rollback(p_version_table, p_revision);
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

-- The monotonic guard: no client, fencemigrate or not, can lower a fence token,
-- rename a fenced resource, or delete or truncate fence rows.
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
