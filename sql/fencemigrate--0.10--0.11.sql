-- fencemigrate 0.10 -> 0.11: a fence whose tokens come from Redis stays at or below the last token a
-- Redis grant recorded (issue 24, defect 6).
--
-- ALTER EXTENSION fencemigrate UPDATE TO '0.11' runs this file; the runner applies it itself
-- to a database at 0.10 (a fresh install runs the current version's full script instead).
\echo Use "ALTER EXTENSION fencemigrate UPDATE TO '0.11'" to load this file. \quit

CREATE OR REPLACE FUNCTION @extschema@.schema_version() RETURNS text
LANGUAGE sql IMMUTABLE
AS $$ SELECT '0.11'::text $$;

-- One row per resource the Redis backend has ever granted: the last token Redis issued for it, as
-- its grant recorded it (see the full script). A database at 0.10 records it from its fences whose
-- tokens come from Redis: their token is the last token a Redis grant advanced them to (only a
-- grant raises such a fence), and updated_at when it did, so each of them is held to it at once.
CREATE TABLE @extschema@.redis_grant (
    resource   text        PRIMARY KEY
               CHECK (resource <> '' AND length(resource) <= 255),
    token      bigint      NOT NULL CHECK (token > 0),
    granted_at timestamptz NOT NULL DEFAULT now()
);
COMMENT ON TABLE @extschema@.redis_grant IS
    'The last token Redis issued per resource, recorded by its grant: a Redis-sourced fence stays at or below it.';
INSERT INTO @extschema@.redis_grant (resource, token, granted_at)
SELECT f.resource, f.token, f.updated_at FROM @extschema@.agent_fence f WHERE f.token_source = 'redis';
-- The token domain of agent_fence, NOT VALID for the same reason: the tokens recorded above are
-- the fences' as they were.
ALTER TABLE @extschema@.redis_grant
    ADD CONSTRAINT redis_grant_token_domain CHECK (token <= 4611686018427387904) NOT VALID;

-- The recorded grants are monotonic, like the lease token counter (SQLSTATE FM002).
CREATE FUNCTION @extschema@.redis_grant_guard() RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF TG_OP = 'UPDATE' AND NEW.resource = OLD.resource AND NEW.token >= OLD.token THEN
        RETURN NEW;
    END IF;
    RAISE EXCEPTION USING ERRCODE = 'FM002',
        MESSAGE = format('redis_grant is monotonic: %s of the recorded grant of %s is not allowed',
                         CASE WHEN TG_OP = 'UPDATE' THEN 'lowering or renaming' ELSE lower(TG_OP) END,
                         coalesce(OLD.resource, '(all)'));
END
$$;

CREATE TRIGGER redis_grant_monotonic
    BEFORE UPDATE OR DELETE ON @extschema@.redis_grant
    FOR EACH ROW EXECUTE FUNCTION @extschema@.redis_grant_guard();

CREATE TRIGGER redis_grant_no_truncate
    BEFORE TRUNCATE ON @extschema@.redis_grant
    FOR EACH STATEMENT EXECUTE FUNCTION @extschema@.redis_grant_guard();

-- A migration role granted before 0.11 reads it, as grant_to_migration_role() grants: SELECT only.
DO $$
DECLARE
    v_role regrole;
BEGIN
    FOR v_role IN SELECT a.grantee::regrole
                    FROM pg_class c, aclexplode(c.relacl) a
                   WHERE c.oid = '@extschema@.agent_fence'::regclass AND a.privilege_type = 'SELECT'
                     AND a.grantee <> c.relowner AND a.grantee <> 0 LOOP
        EXECUTE format('GRANT SELECT ON @extschema@.redis_grant TO %s', v_role);
    END LOOP;
END
$$;

-- agent_fence: while a resource takes its tokens from the built-in lease service, its fence token
-- is at most the last token that service issued (the lease row's token: a grant writes the lease
-- row first, then advances the fence to it), and it leaves the service (lease detach, or a grant
-- by the Redis backend) only while no lease on it is live. The incarnation is a grant's to write,
-- as the one the database is on now, with the token the grant issued: a rewritten incarnation
-- would make a copy of the database (or a promoted standby) issue tokens again that were issued
-- here. updated_at moves with the token only. A fence whose tokens come from Redis is never
-- raised, or moved to Redis, above the last token a Redis grant recorded (redis_grant; none
-- recorded: 0), whoever writes, the owner included: a grant records its token before it advances
-- the fence, so only a token Redis never issued is refused. With two roles only the owner raises
-- such a fence at all, through a grant's advance_fence(). The owner may insert a fence row as it
-- was, above the record too: a restore's COPY loads agent_fence before redis_grant (see Dump and
-- restore), and a fence row is inserted once (a grant of a live Redis lease has written its row
-- already). With one role the owner can still raise the record and then the fence, as it can the
-- lease row: check --db reports a token no GRANT event names (FM413).
CREATE OR REPLACE FUNCTION @extschema@.agent_fence_source_guard() RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_issued  bigint;
    v_holder  text;
    v_expires timestamptz;
    v_granted bigint;
BEGIN
    -- The owner may insert a fence row as it was (a restore's COPY keeps the old incarnation, so the
    -- restored database's next grant moves to a new epoch: see Dump and restore).
    IF ((TG_OP = 'INSERT' AND NEW.incarnation IS NOT NULL
         AND NOT pg_has_role(current_user, (SELECT c.relowner FROM pg_class c WHERE c.oid = TG_RELID), 'USAGE'))
        OR (TG_OP = 'UPDATE' AND NEW.incarnation IS DISTINCT FROM OLD.incarnation))
       AND (NEW.token_source = 'external' OR (TG_OP = 'UPDATE' AND NEW.token <= OLD.token)
            OR split_part(NEW.incarnation, '+', 1) IS DISTINCT FROM
               (SELECT i.incarnation FROM @extschema@.database_incarnation() i)) THEN
        RAISE EXCEPTION USING ERRCODE = 'FM006',
            MESSAGE = format('lease guard: the incarnation of %s is written by a grant only, with the token it '
                             'issued, as the incarnation the database is on now', NEW.resource);
    END IF;
    IF NEW.token_source = 'redis' AND (TG_OP = 'INSERT' OR NEW.token > OLD.token OR OLD.token_source <> 'redis') THEN
        IF NOT pg_has_role(current_user, (SELECT c.relowner FROM pg_class c WHERE c.oid = TG_RELID), 'USAGE') THEN
            RAISE EXCEPTION USING ERRCODE = 'FM006',
                MESSAGE = format('lease guard: the fence of %s takes its tokens from Redis: only a Redis grant raises '
                                 'it (advance_fence()), to the token it issued', NEW.resource);
        END IF;
        IF TG_OP = 'UPDATE' THEN
            SELECT g.token INTO v_granted FROM @extschema@.redis_grant g WHERE g.resource = NEW.resource;
            IF NEW.token > coalesce(v_granted, 0) THEN
                RAISE EXCEPTION USING ERRCODE = 'FM006',
                    MESSAGE = format('lease guard: this fence token is above the last token Redis issued (recorded '
                                     'by its grant): it was never issued (fence token %s of %s, the last token '
                                     'recorded %s)', NEW.token, NEW.resource, coalesce(v_granted, 0));
            END IF;
        END IF;
    END IF;
    IF TG_OP = 'UPDATE' AND NEW.token = OLD.token AND NEW.updated_at IS DISTINCT FROM OLD.updated_at THEN
        RAISE EXCEPTION USING ERRCODE = 'FM006',
            MESSAGE = format('lease guard: updated_at of %s moves with its token only', NEW.resource);
    END IF;
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

-- A grant's fence advance, in its transaction (queries/postgresql/grant_fence.sql and
-- seed_granted_fence.sql): p_resource moves up to p_token, just issued by the lease service
-- p_source on the database's p_incarnation, and takes its tokens from that service from now on; its
-- row is seeded when it has none. True when the fence moved or was seeded; false when a token at or
-- above p_token has written (the caller then rolls the grant back). A Redis grant first records
-- p_token in redis_grant (raised, never lowered), the last token Redis issued, which such a fence
-- may not pass (see agent_fence_source_guard()). It runs as the owner of the fence, the only role
-- that writes redis_grant and raises a fence whose tokens come from Redis.
CREATE OR REPLACE FUNCTION @extschema@.advance_fence(p_resource text, p_token bigint, p_source text, p_incarnation text)
RETURNS boolean
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF p_source = 'redis' THEN
        INSERT INTO @extschema@.redis_grant AS g (resource, token) VALUES (p_resource, p_token)
        ON CONFLICT (resource) DO UPDATE SET token = excluded.token, granted_at = excluded.granted_at
         WHERE g.token < excluded.token;
    END IF;
    UPDATE @extschema@.agent_fence
       SET token = p_token, token_source = p_source, incarnation = p_incarnation, updated_at = now()
     WHERE resource = p_resource AND token < p_token;
    IF FOUND THEN
        RETURN true;
    END IF;
    INSERT INTO @extschema@.agent_fence (resource, token, token_source, incarnation)
    VALUES (p_resource, p_token, p_source, p_incarnation)
    ON CONFLICT (resource) DO NOTHING;
    RETURN FOUND;
END
$$;

-- The extension's tables are marked for pg_dump (see Dump and restore in the full script):
-- redis_grant too.
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_depend d
                WHERE d.classid = 'pg_class'::regclass AND d.objid = '@extschema@.agent_fence'::regclass
                  AND d.deptype = 'e') THEN
        PERFORM pg_extension_config_dump('@extschema@.redis_grant', '');
    END IF;
END
$$;
