-- fencemigrate 0.4 -> 0.5: direct SQL cannot forge a grant or an unissued token.
--
-- ALTER EXTENSION fencemigrate UPDATE TO '0.5' runs this file; the runner applies it itself
-- to a database at 0.4 (a fresh install runs the current version's full script instead).
\echo Use "ALTER EXTENSION fencemigrate UPDATE TO '0.5'" to load this file. \quit

CREATE OR REPLACE FUNCTION @extschema@.schema_version() RETURNS text
LANGUAGE sql IMMUTABLE
AS $$ SELECT '0.5'::text $$;

-- == The lease guard ==
-- The role that runs migrations writes agent_fence and lease (INSERT and UPDATE, see
-- grant_to_migration_role()); these triggers hold those writes to what a grant, renew, release,
-- detach or claim does, so plain SQL is no more powerful than the CLI. SQLSTATE FM006, every
-- message starting 'lease guard: '. A lease is live while it has a holder and
-- expires_at > clock_timestamp(), the clock the lease service judges it by.
--
-- lease: a token is never handed to another holder (renew and release keep holder and token;
-- release clears the holder); a new token goes to another holder only when the old lease is no
-- longer live (a holder granted again while its lease is live keeps it), and a grant's token is
-- above the fence token (the lease_monotonic trigger keeps it above the old one). Holder names
-- are not credentials: a release, renew or grant naming the live holder is what the CLI allows.
CREATE FUNCTION @extschema@.lease_grant_guard() RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_fence bigint;
BEGIN
    IF TG_OP = 'UPDATE' AND NEW.token = OLD.token THEN
        IF NEW.holder IS NOT NULL AND NEW.holder IS DISTINCT FROM OLD.holder THEN
            RAISE EXCEPTION USING ERRCODE = 'FM006',
                MESSAGE = format('lease guard: token %s of %s was %s: a new holder needs a new token, which only a '
                                 'grant issues', OLD.token, OLD.resource,
                                 CASE WHEN OLD.holder IS NULL THEN 'released' ELSE 'issued to ' || OLD.holder END);
        END IF;
        RETURN NEW;
    END IF;
    IF TG_OP = 'UPDATE' AND OLD.holder IS NOT NULL AND NEW.holder IS DISTINCT FROM OLD.holder
       AND OLD.expires_at > clock_timestamp() THEN
        RAISE EXCEPTION USING ERRCODE = 'FM006',
            MESSAGE = format('lease guard: the lease of %s is held by %s (token %s) until %s: only a grant gives it '
                             'to another holder, once it is released or has expired',
                             OLD.resource, OLD.holder, OLD.token, OLD.expires_at);
    END IF;
    IF NEW.holder IS NOT NULL THEN
        SELECT f.token INTO v_fence FROM @extschema@.agent_fence f WHERE f.resource = NEW.resource;
        IF NEW.token <= v_fence THEN
            RAISE EXCEPTION USING ERRCODE = 'FM006',
                MESSAGE = format('lease guard: a grant of %s issues a token above its fence token %s, not %s',
                                 NEW.resource, v_fence, NEW.token);
        END IF;
    END IF;
    RETURN NEW;
END
$$;

CREATE TRIGGER lease_no_forged_grant
    BEFORE INSERT OR UPDATE ON @extschema@.lease
    FOR EACH ROW EXECUTE FUNCTION @extschema@.lease_grant_guard();

-- agent_fence: while a resource takes its tokens from the built-in lease service, its fence token
-- is at most the last token that service issued (the lease row's token: a grant writes the lease
-- row first, then advances the fence to it), and it leaves the service (lease detach, or a grant
-- by the Redis backend) only while no lease on it is live. For 'redis' the database cannot know
-- the Redis counter or lease: nothing is checked here (see README, Token sources).
CREATE FUNCTION @extschema@.agent_fence_source_guard() RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_issued  bigint;
    v_holder  text;
    v_expires timestamptz;
BEGIN
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

CREATE TRIGGER agent_fence_no_unissued_token
    BEFORE INSERT OR UPDATE ON @extschema@.agent_fence
    FOR EACH ROW EXECUTE FUNCTION @extschema@.agent_fence_source_guard();
-- == end of the lease guard ==
