-- The grant an offline (--sql) script written without --token takes when it runs, created by the
-- script in its own session (pg_temp: nothing is added to the database). The grant `fencemigrate
-- upgrade` takes itself (fencemigrate/leases/database.py), as plain SQL in one function:
--   1. the fence schema must be installed, at p_schema_version or later;
--   2. a live lease of another holder is waited for (at most p_wait_ms; a lease granted further in
--      the future than its TTL is implausible and counts as expired, as in lease_lock.sql), then the claim lock and the
--      fence row are locked (an in-flight migration is waited for, at most what is left of p_wait_ms);
--      a resource whose tokens come from Redis is refused;
--   3. the version table's rows must be exactly p_heads, the heads the script was written from (the
--      start of its range; none from base), else FENCED (FM001): the locks keep every other fenced
--      writer out until the script's transaction ends, and the lease until it is released;
--   4. the next token is issued as every grant issues it (next_grant_token(): epochs, see
--      fencemigrate/leases/epochs.py), the lease granted to p_holder for p_ttl_ms, the fence advanced
--      to the token, EXPIRE (an expired holder) and GRANT logged;
--   5. the token is kept in the session's temporary table fencemigrate_script_lease, which the
--      script's claims and ledger calls read it from (script_token.sql) and its release empties
--      (script_release.sql). A session that was granted nothing has no such table: every claim fails.
-- Each refusal raises an error (psql -v ON_ERROR_STOP=1 stops there) and leaves nothing changed.
CREATE OR REPLACE FUNCTION pg_temp.fencemigrate_script_grant(
    p_resource text, p_holder text, p_ttl_ms bigint, p_wait_ms bigint,
    p_version_table text, p_heads text[], p_schema_version text
) RETURNS bigint
LANGUAGE plpgsql
AS $fencemigrate_script$
DECLARE
    v_deadline    timestamptz := clock_timestamp() + p_wait_ms * interval '1 millisecond';
    v_timeout     text := current_setting('lock_timeout');
    v_installed   text;
    v_lease       record;
    v_fence       record;
    v_now         record;
    v_recorded    text;
    v_table       regclass;
    v_found       text[];
    v_wanted      text[];
    v_token       bigint;
    v_standby     boolean := current_setting('synchronous_standby_names') <> '';
    v_detail      jsonb;
BEGIN
    IF to_regprocedure('{schema}.schema_version()') IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = '55000',
            MESSAGE = 'fencemigrate: the fence schema ({schema}) is not installed in this database: install it '
                      '(fencemigrate install, or fencemigrate install --sql | psql) and run the script again; '
                      'nothing was applied';
    END IF;
    v_installed := {schema}.schema_version();
    IF string_to_array(v_installed, '.')::int[] < string_to_array(p_schema_version, '.')::int[] THEN
        RAISE EXCEPTION USING ERRCODE = '55000',
            MESSAGE = format('fencemigrate: the fence schema here is version %s, this script needs %s or later: '
                             'update it (fencemigrate install) and run the script again; nothing was applied',
                             v_installed, p_schema_version);
    END IF;

    INSERT INTO {schema}.lease (resource, token) VALUES (p_resource, 0) ON CONFLICT (resource) DO NOTHING;
    LOOP
        SELECT l.holder, l.token, l.granted_at, l.expires_at,
               l.expires_at <= clock_timestamp()
                   OR coalesce(l.granted_at > clock_timestamp() + l.ttl_ms * interval '1 millisecond', false) AS expired
          INTO v_lease
          FROM {schema}.lease l WHERE l.resource = p_resource;
        EXIT WHEN v_lease.holder IS NULL OR v_lease.expired;
        IF clock_timestamp() >= v_deadline THEN
            RAISE EXCEPTION USING ERRCODE = '55P03',
                MESSAGE = format('lease on %s is busy: held by %s (token %s) until %s; this is transient, try '
                                 'again later (the script waited %s ms for it); nothing was applied',
                                 p_resource, v_lease.holder, v_lease.token, v_lease.expires_at, p_wait_ms);
        END IF;
        PERFORM pg_sleep(least(0.2, greatest(extract(epoch FROM v_deadline - clock_timestamp()), 0.001)));
    END LOOP;

    BEGIN
        PERFORM set_config('lock_timeout',
                           greatest(ceil(extract(epoch FROM v_deadline - clock_timestamp()) * 1000), 1)::bigint || 'ms',
                           true);
        PERFORM pg_advisory_xact_lock({claim_lock_class}, {schema}.resource_key(p_resource));
        SELECT f.token, f.token_source, f.incarnation INTO v_fence
          FROM {schema}.agent_fence f WHERE f.resource = p_resource FOR UPDATE;
        SELECT l.holder, l.token, l.granted_at, l.expires_at,
               l.expires_at <= clock_timestamp()
                   OR coalesce(l.granted_at > clock_timestamp() + l.ttl_ms * interval '1 millisecond', false) AS expired,
               coalesce(l.granted_at > clock_timestamp() + l.ttl_ms * interval '1 millisecond', false) AS implausible
          INTO v_lease
          FROM {schema}.lease l WHERE l.resource = p_resource FOR UPDATE;
    EXCEPTION WHEN lock_not_available THEN
        RAISE EXCEPTION USING ERRCODE = '55P03',
            MESSAGE = format('lease on %s is busy: a migration under an older token is still in flight (its '
                             'holder''s lease has expired); this is transient, try again later (the script '
                             'waited %s ms for it); nothing was applied', p_resource, p_wait_ms);
    END;
    PERFORM set_config('lock_timeout', v_timeout, true);
    IF v_fence.token_source = 'redis' THEN
        RAISE EXCEPTION USING ERRCODE = '55000',
            MESSAGE = format('fencemigrate: the tokens of %s come from Redis: a script takes its lease from the '
                             'database''s lease service only; write it with --token N from a Redis grant; '
                             'nothing was applied', p_resource);
    END IF;
    IF v_lease.holder IS NOT NULL AND NOT v_lease.expired THEN
        RAISE EXCEPTION USING ERRCODE = '55P03',
            MESSAGE = format('lease on %s is busy: held by %s (token %s) until %s; this is transient, try again '
                             'later; nothing was applied', p_resource, v_lease.holder, v_lease.token,
                             v_lease.expires_at);
    END IF;

    v_table := to_regclass(p_version_table);
    v_found := '{}';
    IF v_table IS NOT NULL THEN
        EXECUTE format('SELECT coalesce(array_agg(v.version_num::text ORDER BY v.version_num::text), ''{}'') '
                       'FROM %s v', v_table) INTO v_found;
    END IF;
    SELECT coalesce(array_agg(h ORDER BY h), '{}') INTO v_wanted FROM unnest(p_heads) h;
    IF v_found <> v_wanted THEN
        RAISE EXCEPTION USING ERRCODE = 'FM001',
            MESSAGE = format('FENCED: heads are %s, this script was written from %s (resource %s). This is NOT a '
                             'transient error: do not retry, rebase, renumber or re-apply; re-read the state and '
                             're-plan. Nothing was applied',
                             coalesce(nullif(array_to_string(v_found, ','), ''), 'base'),
                             coalesce(nullif(array_to_string(v_wanted, ','), ''), 'base'), p_resource),
            DETAIL = json_build_object('resource', p_resource, 'token', NULL, 'fence_token', v_fence.token,
                                       'reason', 'heads moved')::text;
    END IF;

    SELECT i.incarnation, i.timeline INTO v_now FROM {schema}.database_incarnation() i;
    SELECT p INTO v_recorded FROM unnest(string_to_array(v_fence.incarnation, '+')) p WHERE strpos(p, ':') = 0 LIMIT 1;
    v_token := {schema}.next_grant_token(greatest(v_lease.token, coalesce(v_fence.token, 0)), v_fence.incarnation);
    IF current_setting('synchronous_commit') = 'off'
       OR (v_standby AND current_setting('synchronous_commit') IN ('local', 'remote_write')) THEN
        PERFORM set_config('synchronous_commit', 'on', true);
    END IF;
    IF v_lease.implausible THEN  -- its holder's clock was ahead: let it go, so that the guard sees no live lease
        UPDATE {schema}.lease SET holder = NULL, ttl_ms = NULL, granted_at = NULL, expires_at = NULL
         WHERE resource = p_resource;
    END IF;
    UPDATE {schema}.lease
       SET holder = p_holder, token = v_token, ttl_ms = p_ttl_ms,
           replication = CASE WHEN v_standby THEN 'synchronous' ELSE 'asynchronous' END,
           granted_at = clock_timestamp(),
           expires_at = clock_timestamp() + p_ttl_ms * interval '1 millisecond'
     WHERE resource = p_resource;
    IF NOT {schema}.advance_fence(p_resource, v_token, 'lease service', v_now.incarnation) THEN
        RAISE EXCEPTION USING ERRCODE = '55000',
            MESSAGE = format('the grant of token %s could not advance the fence of %s: a higher token has written '
                             'meanwhile; nothing was applied', v_token, p_resource);
    END IF;
    IF v_lease.holder IS NOT NULL AND v_lease.holder <> p_holder AND v_lease.implausible THEN  -- logged now
        PERFORM {schema}.log_event(NULL, p_resource, 'EXPIRE', v_lease.holder, v_lease.token, NULL,
                                   jsonb_build_object('implausible', true, 'granted_at', v_lease.granted_at,
                                                      'expires_at', v_lease.expires_at)::text);
    ELSIF v_lease.holder IS NOT NULL AND NOT v_lease.implausible THEN
        PERFORM {schema}.log_event(v_lease.expires_at, p_resource, 'EXPIRE', v_lease.holder, v_lease.token, NULL, NULL);
    END IF;
    v_detail := jsonb_build_object('ttl_ms', p_ttl_ms);
    IF v_recorded IS NOT NULL AND v_recorded <> v_now.incarnation THEN
        v_detail := v_detail || jsonb_build_object(
            'new_epoch', jsonb_build_object('last_grant_on', v_fence.incarnation, 'now_on', v_now.incarnation));
    END IF;
    PERFORM {schema}.log_event(NULL, p_resource, 'GRANT', p_holder, v_token, NULL, v_detail::text);

    CREATE TEMPORARY TABLE IF NOT EXISTS fencemigrate_script_lease (
        resource text NOT NULL, holder text NOT NULL, token bigint NOT NULL
    );
    DELETE FROM pg_temp.fencemigrate_script_lease;
    INSERT INTO pg_temp.fencemigrate_script_lease (resource, holder, token) VALUES (p_resource, p_holder, v_token);
    RETURN v_token;
END
$fencemigrate_script$
