-- fencemigrate 0.6 -> 0.7 on MySQL and MariaDB: direct SQL cannot raise a fence whose tokens come
-- from Redis above the last token Redis issued.
--
-- The runner applies this file one statement at a time (DELIMITER lines work as in the mysql
-- client), under the install named lock, on a database at 0.6 (a fresh install runs the current
-- version's full script instead).

-- == Redis grants and their guard ==
-- The database cannot ask Redis for its counter, so every Redis grant records the token it issued
-- in redis_grant, in its own transaction before it advances the fence (record_redis_grant.sql),
-- and the lease guard holds a fence whose tokens come from Redis to that record, as it holds a
-- fence of the built-in lease service to the lease's counter.

-- One row per resource ever granted by the Redis lease backend. token is the last token Redis
-- issued for it; granted_at, when the grant recorded it. No holder: the grant's GRANT event in
-- fence_event names it.
CREATE TABLE IF NOT EXISTS @extschema@_redis_grant (
    resource   VARCHAR(255) NOT NULL PRIMARY KEY,
    token      BIGINT       NOT NULL,
    granted_at DATETIME(6)  NOT NULL,
    CONSTRAINT @extschema@_redis_grant_resource CHECK (resource <> ''),
    CONSTRAINT @extschema@_redis_grant_token CHECK (token > 0)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

DELIMITER //
-- agent_fence: while a resource takes its tokens from Redis, its fence token is at most the last
-- token Redis issued for it, as its grants recorded it (none recorded: 0), and a fence moves to
-- 'redis' only at or below that token (a grant records its token first): SQLSTATE FM006, as the
-- lease guard's other refusals. A fence may leave Redis: the database cannot see whether a Redis
-- lease is live (`lease detach --lease-url` asks Redis). Forging the record first, then the
-- fence, is not refused: the same limit as forging the lease row for the built-in service;
-- check --db reports the fence no GRANT event explains (FM413). The record is read with a locking
-- read, as the lease row is. These fire after agent_fence's other triggers (created before them).
CREATE TRIGGER IF NOT EXISTS @extschema@_agent_fence_no_unissued_redis_token
BEFORE UPDATE ON @extschema@_agent_fence FOR EACH ROW
BEGIN
    DECLARE v_recorded BIGINT DEFAULT NULL;
    IF NEW.token_source = 'redis' AND (NEW.token > OLD.token OR OLD.token_source <> 'redis') THEN
        SELECT g.token INTO v_recorded FROM @extschema@_redis_grant g WHERE g.resource = NEW.resource LOCK IN SHARE MODE;
        IF NEW.token > COALESCE(v_recorded, 0) THEN
            SIGNAL SQLSTATE 'FM006'
                SET MESSAGE_TEXT = 'lease guard: this fence token is above the last token Redis issued (recorded by its grant): it was never issued';
        END IF;
    END IF;
END//
CREATE TRIGGER IF NOT EXISTS @extschema@_agent_fence_insert_unissued_redis_token
BEFORE INSERT ON @extschema@_agent_fence FOR EACH ROW
BEGIN
    DECLARE v_recorded BIGINT DEFAULT NULL;
    IF NEW.token_source = 'redis' THEN
        SELECT g.token INTO v_recorded FROM @extschema@_redis_grant g WHERE g.resource = NEW.resource LOCK IN SHARE MODE;
        IF NEW.token > COALESCE(v_recorded, 0) THEN
            SIGNAL SQLSTATE 'FM006'
                SET MESSAGE_TEXT = 'lease guard: this fence token is above the last token Redis issued (recorded by its grant): it was never issued';
        END IF;
    END IF;
END//
-- The monotonic guard of the record (SQLSTATE FM002), as of the lease token counter: the token
-- never goes down, and rows are never renamed or deleted (REPLACE fires the delete guard).
CREATE TRIGGER IF NOT EXISTS @extschema@_redis_grant_monotonic
BEFORE UPDATE ON @extschema@_redis_grant FOR EACH ROW
BEGIN
    IF NEW.resource <> OLD.resource OR NEW.token < OLD.token THEN
        SIGNAL SQLSTATE 'FM002'
            SET MESSAGE_TEXT = 'redis_grant is monotonic: lowering or renaming a recorded grant is not allowed';
    END IF;
END//
CREATE TRIGGER IF NOT EXISTS @extschema@_redis_grant_no_delete
BEFORE DELETE ON @extschema@_redis_grant FOR EACH ROW
BEGIN
    SIGNAL SQLSTATE 'FM002'
        SET MESSAGE_TEXT = 'redis_grant is monotonic: deleting a recorded grant is not allowed';
END//
-- The token domain of recorded grants (see agent_fence's).
CREATE TRIGGER IF NOT EXISTS @extschema@_redis_grant_token_domain_insert
BEFORE INSERT ON @extschema@_redis_grant FOR EACH ROW
BEGIN
    IF NEW.token < 1 OR NEW.token > 4611686018427387904 THEN
        SIGNAL SQLSTATE '22003' SET MESSAGE_TEXT = 'Redis grant tokens are integers from 1 to 4611686018427387904';
    END IF;
END//
CREATE TRIGGER IF NOT EXISTS @extschema@_redis_grant_token_domain_update
BEFORE UPDATE ON @extschema@_redis_grant FOR EACH ROW
BEGIN
    IF NEW.token <> OLD.token AND (NEW.token < 1 OR NEW.token > 4611686018427387904) THEN
        SIGNAL SQLSTATE '22003' SET MESSAGE_TEXT = 'Redis grant tokens are integers from 1 to 4611686018427387904';
    END IF;
END//
DELIMITER ;

-- A database updated from 0.6 records each fence whose tokens come from Redis at its token, which
-- is the last token Redis issued (its last grant advanced the fence to it, and no claim raises
-- such a fence), as of that advance (updated_at): its holder and its next grant go on as before.
-- Committed with the version row below (the runner commits once the last statement has run).
INSERT INTO @extschema@_redis_grant (resource, token, granted_at)
SELECT resource, token, updated_at FROM @extschema@_agent_fence WHERE token_source = 'redis';
-- == end of Redis grants ==

UPDATE @extschema@_schema_version SET version = '0.7' WHERE one_row = 1;
