-- fencemigrate 0.11 -> 0.12: the ledger adopts the revisions a database had applied before it was
-- fenced (issue 25, item 3).
--
-- ALTER EXTENSION fencemigrate UPDATE TO '0.12' runs this file; the runner applies it itself
-- to a database at 0.11 (a fresh install runs the current version's full script instead).
\echo Use "ALTER EXTENSION fencemigrate UPDATE TO '0.12'" to load this file. \quit

CREATE OR REPLACE FUNCTION @extschema@.schema_version() RETURNS text
LANGUAGE sql IMMUTABLE
AS $$ SELECT '0.12'::text $$;

-- An adopted ledger row: a revision the version table had applied when the database was first
-- fenced, recorded with method 'adopt' and applied_token 0 (no token applied it), and one ADOPT
-- event for all of them.
ALTER TABLE @extschema@.applied_revision
    DROP CONSTRAINT applied_revision_method_check,
    DROP CONSTRAINT applied_revision_applied_token_check;
ALTER TABLE @extschema@.applied_revision
    ADD CONSTRAINT applied_revision_method_check CHECK (method IN ('upgrade', 'stamp', 'adopt')),
    ADD CONSTRAINT applied_revision_applied_token_check
        CHECK (CASE WHEN method = 'adopt' THEN applied_token = 0 ELSE applied_token > 0 END);
ALTER TABLE @extschema@.fence_event
    DROP CONSTRAINT fence_event_kind_check,
    ADD CONSTRAINT fence_event_kind_check
        CHECK (kind IN ('GRANT', 'RENEW', 'RELEASE', 'EXPIRE', 'PREEMPT', 'LOST', 'APPLY', 'STAMP',
                        'ROLLBACK', 'UNSTAMP', 'FENCED', 'RESOLVE', 'ADOPT'));

-- A re-apply of an adopted revision is refused: no token applied it.
CREATE OR REPLACE FUNCTION @extschema@.check_reapply(
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

-- A stamp going down (and stamp --purge's removals) is logged as UNSTAMP, not ROLLBACK; a rollback
-- that ran the applied text's downgrade() in place of a changed file's says so in its detail.
DROP FUNCTION @extschema@.record_steps(text, text, bigint, text, text[], text[], text[], text[], text[]);
DROP FUNCTION @extschema@.record_rollback(text, text, text, bigint, text);
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
