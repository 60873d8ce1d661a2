-- fencemigrate 0.4 -> 0.5 on MySQL and MariaDB: direct SQL cannot forge a grant or an unissued token.
--
-- The runner applies this file one statement at a time (DELIMITER lines work as in the mysql
-- client), under the install named lock, on a database at 0.4 (a fresh install runs the current
-- version's full script instead).

-- == The lease guard ==
-- The same rules as PostgreSQL's lease_grant_guard() and agent_fence_source_guard()
-- (sql/fencemigrate--0.4--0.5.sql): SQLSTATE FM006, every message starting 'lease guard: '. A
-- lease is live while it has a holder and expires_at is after UTC_TIMESTAMP(6), the server's clock
-- that the lease service judges it by (at the start of the statement). REPLACE fires the delete
-- guard; INSERT ... ON DUPLICATE KEY UPDATE fires these UPDATE triggers for the row it updates.
DELIMITER //
-- lease: a token is never handed to another holder; a new token goes to another holder only when
-- the old lease is no longer live; a grant's token is above the fence token.
CREATE TRIGGER IF NOT EXISTS @extschema@_lease_no_forged_grant
BEFORE UPDATE ON @extschema@_lease FOR EACH ROW
BEGIN
    DECLARE v_fence BIGINT DEFAULT NULL;
    IF NEW.token = OLD.token THEN
        IF NEW.holder IS NOT NULL AND NOT (NEW.holder <=> OLD.holder) THEN
            SIGNAL SQLSTATE 'FM006'
                SET MESSAGE_TEXT = 'lease guard: this token was issued to another holder or released: a new holder needs a new token, which only a grant issues';
        END IF;
    ELSEIF OLD.holder IS NOT NULL AND NOT (NEW.holder <=> OLD.holder) AND OLD.expires_at > UTC_TIMESTAMP(6) THEN
        SIGNAL SQLSTATE 'FM006'
            SET MESSAGE_TEXT = 'lease guard: the lease is held by another holder until it expires: only a grant gives it to another holder, once it is released or has expired';
    ELSEIF NEW.holder IS NOT NULL THEN
        SELECT f.token INTO v_fence FROM @extschema@_agent_fence f WHERE f.resource = NEW.resource LOCK IN SHARE MODE;
        IF NEW.token <= v_fence THEN
            SIGNAL SQLSTATE 'FM006' SET MESSAGE_TEXT = 'lease guard: a grant issues a token above the fence token';
        END IF;
    END IF;
END//
CREATE TRIGGER IF NOT EXISTS @extschema@_lease_insert_above_fence
BEFORE INSERT ON @extschema@_lease FOR EACH ROW
BEGIN
    DECLARE v_fence BIGINT DEFAULT NULL;
    IF NEW.holder IS NOT NULL THEN
        SELECT f.token INTO v_fence FROM @extschema@_agent_fence f WHERE f.resource = NEW.resource LOCK IN SHARE MODE;
        IF NEW.token <= v_fence THEN
            SIGNAL SQLSTATE 'FM006' SET MESSAGE_TEXT = 'lease guard: a grant issues a token above the fence token';
        END IF;
    END IF;
END//
-- agent_fence: while a resource takes its tokens from the built-in lease service, its fence token
-- is at most the last token that service issued, and it leaves the service only while no lease
-- on it is live. 'redis': nothing the database can check. The lease row is read with a locking
-- read: the latest committed row, not the snapshot of a REPEATABLE READ transaction begun earlier.
CREATE TRIGGER IF NOT EXISTS @extschema@_agent_fence_no_unissued_token
BEFORE UPDATE ON @extschema@_agent_fence FOR EACH ROW
BEGIN
    DECLARE v_issued BIGINT DEFAULT NULL;
    DECLARE v_live BOOLEAN DEFAULT FALSE;
    IF (NEW.token <> OLD.token OR NEW.token_source <> OLD.token_source)
       AND (NEW.token_source = 'lease service' OR OLD.token_source = 'lease service') THEN
        SELECT l.token, l.holder IS NOT NULL AND l.expires_at > UTC_TIMESTAMP(6) INTO v_issued, v_live
          FROM @extschema@_lease l WHERE l.resource = NEW.resource LOCK IN SHARE MODE;
        IF NEW.token_source = 'lease service' AND NEW.token > COALESCE(v_issued, 0) THEN
            SIGNAL SQLSTATE 'FM006'
                SET MESSAGE_TEXT = 'lease guard: this fence token is above the last token the lease service issued: it was never issued';
        END IF;
        IF NEW.token_source <> 'lease service' AND v_live THEN
            SIGNAL SQLSTATE 'FM006'
                SET MESSAGE_TEXT = 'lease guard: the lease of this resource is live: its fence cannot leave the lease service while that lease is live';
        END IF;
    END IF;
END//
CREATE TRIGGER IF NOT EXISTS @extschema@_agent_fence_insert_unissued_token
BEFORE INSERT ON @extschema@_agent_fence FOR EACH ROW
BEGIN
    DECLARE v_issued BIGINT DEFAULT NULL;
    IF NEW.token_source = 'lease service' THEN
        SELECT l.token INTO v_issued FROM @extschema@_lease l WHERE l.resource = NEW.resource LOCK IN SHARE MODE;
        IF NEW.token > COALESCE(v_issued, 0) THEN
            SIGNAL SQLSTATE 'FM006'
                SET MESSAGE_TEXT = 'lease guard: this fence token is above the last token the lease service issued: it was never issued';
        END IF;
    END IF;
END//
DELIMITER ;
-- == end of the lease guard ==

UPDATE @extschema@_schema_version SET version = '0.5' WHERE one_row = 1;
