-- fencemigrate 0.6 -> 0.7 on SQLite: direct SQL cannot raise a fence whose tokens come from Redis
-- above the last token Redis issued.
--
-- The runner applies this file, one statement at a time, inside a fenced run's own transaction:
-- on a database at 0.6 (a fresh install runs the current version's full script instead).

-- == Redis grants and their guard ==
-- The database cannot ask Redis for its counter, so every Redis grant records the token it issued
-- here, in its own transaction before it advances the fence (record_redis_grant.sql), and the
-- lease guard holds a fence whose tokens come from Redis to that record, as it holds a fence of
-- the built-in lease service to the lease's counter.

-- One row per resource ever granted by the Redis lease backend. token is the last token Redis
-- issued for it; granted_at, when the grant recorded it. No holder: the grant's GRANT event in
-- fence_event names it.
CREATE TABLE IF NOT EXISTS @extschema@_redis_grant (
    resource   TEXT    NOT NULL PRIMARY KEY
               CHECK (resource <> '' AND length(resource) <= 255),
    token      INTEGER NOT NULL CHECK (token > 0),
    granted_at TEXT    NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
);

-- The monotonic guard of the record, as of the lease token counter: the token never goes down
-- (INSERT OR REPLACE deletes the row it replaces without firing delete triggers, so an insert may
-- not land below it either), and rows are never renamed or deleted.
CREATE TRIGGER IF NOT EXISTS @extschema@_redis_grant_monotonic
BEFORE UPDATE ON @extschema@_redis_grant
FOR EACH ROW WHEN NEW.resource IS NOT OLD.resource OR NEW.token < OLD.token
BEGIN
    SELECT RAISE(ABORT, 'redis_grant is monotonic: lowering or renaming a recorded grant is not allowed');
END;

CREATE TRIGGER IF NOT EXISTS @extschema@_redis_grant_no_replace_lower
BEFORE INSERT ON @extschema@_redis_grant
FOR EACH ROW WHEN EXISTS (SELECT 1 FROM @extschema@_redis_grant g
                          WHERE g.resource = NEW.resource AND g.token > NEW.token)
BEGIN
    SELECT RAISE(ABORT, 'redis_grant is monotonic: lowering or renaming a recorded grant is not allowed');
END;

CREATE TRIGGER IF NOT EXISTS @extschema@_redis_grant_no_delete
BEFORE DELETE ON @extschema@_redis_grant
FOR EACH ROW
BEGIN
    SELECT RAISE(ABORT, 'redis_grant is monotonic: deleting a recorded grant is not allowed');
END;

-- The token domain of recorded grants (see agent_fence's).
CREATE TRIGGER IF NOT EXISTS @extschema@_redis_grant_token_domain_insert
BEFORE INSERT ON @extschema@_redis_grant
FOR EACH ROW WHEN typeof(NEW.token) <> 'integer' OR NEW.token < 1 OR NEW.token > 4611686018427387904
BEGIN
    SELECT RAISE(ABORT, 'Redis grant tokens are integers from 1 to 4611686018427387904');
END;
CREATE TRIGGER IF NOT EXISTS @extschema@_redis_grant_token_domain_update
BEFORE UPDATE OF token ON @extschema@_redis_grant
FOR EACH ROW WHEN typeof(NEW.token) <> 'integer' OR NEW.token < 1 OR NEW.token > 4611686018427387904
BEGIN
    SELECT RAISE(ABORT, 'Redis grant tokens are integers from 1 to 4611686018427387904');
END;

-- agent_fence: while a resource takes its tokens from Redis, its fence token is at most the last
-- token Redis issued for it, as its grants recorded it (none recorded: 0), and a fence moves to
-- 'redis' only at or below that token (a grant records its token first). A fence may leave Redis:
-- the database cannot see whether a Redis lease is live (`lease detach --lease-url` asks Redis).
-- Forging the record first, then the fence, is not refused: the same limit as forging the lease
-- row for the built-in service; check --db reports the fence no GRANT event explains (FM413).
CREATE TRIGGER IF NOT EXISTS @extschema@_agent_fence_no_unissued_redis_token
BEFORE UPDATE ON @extschema@_agent_fence
FOR EACH ROW WHEN typeof(NEW.token) = 'integer' AND NEW.token <= 4611686018427387904 AND NEW.token_source = 'redis'
                  AND NEW.token >= OLD.token AND (NEW.token > OLD.token OR OLD.token_source <> 'redis')
                  AND NEW.token > coalesce((SELECT g.token FROM @extschema@_redis_grant g WHERE g.resource = NEW.resource), 0)
BEGIN
    SELECT RAISE(ABORT, 'lease guard: this fence token is above the last token Redis issued (recorded by its grant): it was never issued');
END;

CREATE TRIGGER IF NOT EXISTS @extschema@_agent_fence_insert_unissued_redis_token
BEFORE INSERT ON @extschema@_agent_fence
FOR EACH ROW WHEN typeof(NEW.token) = 'integer' AND NEW.token <= 4611686018427387904 AND NEW.token_source = 'redis'
                  AND NEW.token > coalesce((SELECT g.token FROM @extschema@_redis_grant g WHERE g.resource = NEW.resource), 0)
BEGIN
    SELECT RAISE(ABORT, 'lease guard: this fence token is above the last token Redis issued (recorded by its grant): it was never issued');
END;

-- A database updated from 0.6 records each fence whose tokens come from Redis at its token, which
-- is the last token Redis issued (its last grant advanced the fence to it, and no claim raises
-- such a fence), as of that advance (updated_at): its holder and its next grant go on as before.
INSERT INTO @extschema@_redis_grant (resource, token, granted_at)
SELECT resource, token, updated_at FROM @extschema@_agent_fence WHERE token_source = 'redis';
-- == end of Redis grants ==

UPDATE @extschema@_schema_version SET version = '0.7' WHERE one_row = 1;
