-- fencemigrate 1.0 on MySQL and MariaDB: the fence schema, complete.
--
-- MySQL's schemas are databases, and a migration user may not create databases: every object
-- lives in the application's own database, named with the fence schema's name as a prefix
-- (@extschema@_agent_fence becomes `fencemigrate_agent_fence` by default; fencemigrate_schema
-- in alembic.ini changes the prefix). The runner applies this file one statement at a time
-- (DELIMITER lines work as in the mysql client) at the start of the first fenced run, under the
-- named lock 'fencemigrate-install:<database>'; every statement is idempotent. Later versions
-- come with upgrade scripts (fencemigrate--1.0--1.1.sql, ...). 1.0 squashes the pre-release
-- versions 0.3 to 0.8; the triggers keep the order they were created in then.
--
-- Same tables and columns as the PostgreSQL schema (its full script in sql/), plus the ledger's
-- `state`: MySQL commits DDL implicitly, so a revision runs in pre-check mode and its ledger row
-- is written as 'applying' (or 'rolling_back') before its DDL and settled after it. A row left
-- unsettled is a dirty revision: fenced writes are refused until `fencemigrate resolve`.
-- Times are UTC (UTC_TIMESTAMP(6)), written by the statements in sql/queries/mysql/.
-- The guards are triggers; MySQL fires the triggers of one table, event and timing in the order
-- they were created, and that order is the one below. (TRUNCATE and DROP fire no triggers on
-- MySQL: the guards protect against mistakes and stale writers, not against someone with DROP
-- privilege.)


-- == Tables ==

-- One row per fenced resource: the highest token that has ever written to it.
-- token_source: where the resource's tokens come from: 'external' (a harness's own leases pass
-- --token; the first claim seeds its row so), 'lease service' (built in) or 'redis'. A grant
-- advances the fence to the token it issued and sets the source (the grant_fence statement), so on a leased
-- resource the fence token is the last token issued, and the claim statement refuses any higher token
-- (FENCED: never issued).
CREATE TABLE IF NOT EXISTS @extschema@_agent_fence (
    resource     VARCHAR(255) NOT NULL PRIMARY KEY,
    token        BIGINT       NOT NULL,
    updated_at   DATETIME(6)  NOT NULL,
    token_source VARCHAR(16)  NOT NULL DEFAULT 'external',
    CONSTRAINT @extschema@_agent_fence_resource CHECK (resource <> ''),
    CONSTRAINT @extschema@_agent_fence_token CHECK (token > 0),
    CONSTRAINT @extschema@_agent_fence_token_source
        CHECK (token_source IN ('external', 'lease service', 'redis'))
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

-- One row per revision applied (or stamped) by a fenced run, per Alembic version table.
-- Re-applying a revision is legal only under the token that applied it. state is 'applied'
-- once the revision's DDL and Alembic's version row are in; 'applying' / 'rolling_back' while
-- its DDL runs (state_token: the token of the run that started it, state_since: when).
-- source: the text of the revision file, as the run that wrote the row read it (the same bytes its
-- script_sha256 was computed from, decoded as UTF-8), for `fencemigrate show REV --applied` and
-- check --db's drift diff, stored as COMPRESS(text): zlib, which MySQL and MariaDB both build in,
-- behind a 4-byte length (about a quarter of the size on source code). The ledger statements
-- compress it on the server (COMPRESS(CONVERT(:source USING utf8mb4)), so the bytes are UTF-8
-- whatever the connection's character set) and read it back with UNCOMPRESS(). InnoDB's own page
-- compression would need a server setting and a whole-table option; COMPRESS() needs neither.
-- NULL ("source not recorded") for a revision adopted with no readable file, or a file that is not
-- UTF-8 text.
CREATE TABLE IF NOT EXISTS @extschema@_applied_revision (
    version_table VARCHAR(255) NOT NULL,
    revision      VARCHAR(255) NOT NULL,
    resource      VARCHAR(255) NOT NULL,
    applied_token BIGINT       NOT NULL,
    holder        VARCHAR(255) NOT NULL,
    method        VARCHAR(16)  NOT NULL,
    applied_at    DATETIME(6)  NOT NULL,
    script_sha256 CHAR(64)     NULL,
    state         VARCHAR(16)  NOT NULL DEFAULT 'applied',
    state_token   BIGINT       NULL,
    state_holder  VARCHAR(255) NULL,
    state_since   DATETIME(6)  NULL,
    source        LONGBLOB     NULL,
    PRIMARY KEY (version_table, revision),
    KEY @extschema@_applied_revision_unsettled (resource, state),
    CONSTRAINT @extschema@_applied_revision_state
        CHECK (state IN ('applied', 'applying', 'rolling_back')),
    CONSTRAINT @extschema@_applied_revision_settled
        CHECK ((state = 'applied') = (state_token IS NULL)),
    -- An adopted row (applied before fencing) has token 0; every other row, the token that wrote it.
    CONSTRAINT @extschema@_applied_revision_token
        CHECK (CASE WHEN method = 'adopt' THEN applied_token = 0 ELSE applied_token > 0 END),
    CONSTRAINT @extschema@_applied_revision_method CHECK (method IN ('upgrade', 'stamp', 'adopt'))
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

-- One row per resource ever leased. token is the highest token the lease service has issued
-- for the resource: the durable counter, which only goes up. holder and expires_at are NULL
-- when the lease is released.
CREATE TABLE IF NOT EXISTS @extschema@_lease (
    resource   VARCHAR(255) NOT NULL PRIMARY KEY,
    token      BIGINT       NOT NULL,
    holder     VARCHAR(255) NULL,
    ttl_ms     BIGINT       NULL,
    granted_at DATETIME(6)  NULL,
    expires_at DATETIME(6)  NULL,
    CONSTRAINT @extschema@_lease_resource CHECK (resource <> ''),
    CONSTRAINT @extschema@_lease_token CHECK (token >= 0),
    CONSTRAINT @extschema@_lease_holder CHECK (holder <> ''),
    CONSTRAINT @extschema@_lease_ttl CHECK (ttl_ms > 0),
    CONSTRAINT @extschema@_lease_held CHECK ((holder IS NULL) = (expires_at IS NULL))
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

-- One row per resource ever granted by the Redis lease backend. token is the last token Redis
-- issued for it: the database cannot ask Redis for its counter, so every Redis grant records its
-- token here, in its own transaction before it advances the fence (the record_redis_grant statement), and
-- the lease guard holds a fence whose tokens come from Redis to that record, as it holds a fence
-- of the built-in lease service to the lease's counter. granted_at: when the grant recorded it.
-- No holder: the grant's GRANT event in fence_event names it.
CREATE TABLE IF NOT EXISTS @extschema@_redis_grant (
    resource   VARCHAR(255) NOT NULL PRIMARY KEY,
    token      BIGINT       NOT NULL,
    granted_at DATETIME(6)  NOT NULL,
    CONSTRAINT @extschema@_redis_grant_resource CHECK (resource <> ''),
    CONSTRAINT @extschema@_redis_grant_token CHECK (token > 0)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

-- The story of every resource, for `fencemigrate timeline`: lease grants, renewals, releases,
-- expiries seen, preemptions, applied and rolled-back revisions, FENCED rejections, and dirty
-- revisions resolved by hand.
CREATE TABLE IF NOT EXISTS @extschema@_fence_event (
    id       BIGINT       NOT NULL AUTO_INCREMENT PRIMARY KEY,
    at       DATETIME(6)  NOT NULL,
    resource VARCHAR(255) NOT NULL,
    kind     VARCHAR(16)  NOT NULL,
    holder   VARCHAR(255) NULL,
    token    BIGINT       NULL,
    revision VARCHAR(255) NULL,
    detail   TEXT         NULL,
    KEY @extschema@_fence_event_resource_at (resource, at),
    CONSTRAINT @extschema@_fence_event_kind
        CHECK (kind IN ('GRANT', 'RENEW', 'RELEASE', 'EXPIRE', 'PREEMPT', 'LOST', 'APPLY',
                        'STAMP', 'ROLLBACK', 'UNSTAMP', 'FENCED', 'RESOLVE', 'ADOPT'))
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

-- Version tables whose guard was removed on purpose (fencemigrate install --allow-tokenless-writes).
CREATE TABLE IF NOT EXISTS @extschema@_tokenless_writes_allowed (
    version_table VARCHAR(255) NOT NULL PRIMARY KEY,
    allowed_at    DATETIME(6)  NOT NULL
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

-- Writes without a token: once a database is fenced, Alembic's version table refuses writes from
-- a session that holds no fencemigrate named lock (pre-check mode and `resolve` hold it for their
-- whole run): triggers created per version table from guard_version_table in sql/queries/mysql.sql.
-- MySQL has already committed the revision's DDL by then, so the refused write is recorded here as
-- a dirty revision: this table is MyISAM, not transactional, so the row stays although the refused
-- statement is rolled back. `fencemigrate resolve` settles it like any dirty revision.
CREATE TABLE IF NOT EXISTS @extschema@_tokenless_write (
    id            BIGINT       NOT NULL AUTO_INCREMENT PRIMARY KEY,
    at            DATETIME(6)  NOT NULL,
    version_table VARCHAR(255) NOT NULL,
    revision      VARCHAR(255) NOT NULL,
    state         VARCHAR(16)  NOT NULL
) ENGINE = MyISAM DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;


-- == The fence's guards ==

DELIMITER //
-- The monotonic guard: no client, fencemigrate or not, can lower a fence token, rename a
-- fenced resource or delete a fence row (SQLSTATE FM002, as on PostgreSQL).
CREATE TRIGGER IF NOT EXISTS @extschema@_agent_fence_monotonic
BEFORE UPDATE ON @extschema@_agent_fence FOR EACH ROW
BEGIN
    IF NEW.resource <> OLD.resource OR NEW.token < OLD.token THEN
        SIGNAL SQLSTATE 'FM002'
            SET MESSAGE_TEXT = 'agent_fence is monotonic: a fence token cannot go down and a fenced resource cannot be renamed';
    END IF;
END//
CREATE TRIGGER IF NOT EXISTS @extschema@_agent_fence_no_delete
BEFORE DELETE ON @extschema@_agent_fence FOR EACH ROW
BEGIN
    SIGNAL SQLSTATE 'FM002'
        SET MESSAGE_TEXT = 'agent_fence is monotonic: deleting fence rows is not allowed';
END//
-- Tokens are 1 .. 2^62 (4611686018427387904; lease counters from 0): a grant issues one above
-- the fence, which must not overflow. Triggers, checked on every write: a row already out of range (as
-- restored from an old dump) stays readable, and its next grant is refused cleanly.
CREATE TRIGGER IF NOT EXISTS @extschema@_agent_fence_token_domain_insert
BEFORE INSERT ON @extschema@_agent_fence FOR EACH ROW
BEGIN
    IF NEW.token < 1 OR NEW.token > 4611686018427387904 THEN
        SIGNAL SQLSTATE '22003' SET MESSAGE_TEXT = 'fence tokens are integers from 1 to 4611686018427387904';
    END IF;
END//
CREATE TRIGGER IF NOT EXISTS @extschema@_agent_fence_token_domain_update
BEFORE UPDATE ON @extschema@_agent_fence FOR EACH ROW
BEGIN
    IF NEW.token <> OLD.token AND (NEW.token < 1 OR NEW.token > 4611686018427387904) THEN
        SIGNAL SQLSTATE '22003' SET MESSAGE_TEXT = 'fence tokens are integers from 1 to 4611686018427387904';
    END IF;
END//
-- The lease guard: the same rules as PostgreSQL's agent_fence_source_guard() and
-- lease_grant_guard() (its full script in sql/): SQLSTATE FM006, every message starting
-- 'lease guard: '. A lease is live while it has a holder and expires_at is after
-- UTC_TIMESTAMP(6), the server's clock that the lease service judges it by (at the start of the
-- statement). REPLACE fires the delete guard; INSERT ... ON DUPLICATE KEY UPDATE fires the UPDATE
-- triggers for the row it updates.
-- agent_fence: while a resource takes its tokens from the built-in lease service, its fence token
-- is at most the last token that service issued, and it leaves the service only while no lease
-- on it is live ('redis': below). The lease row is read with a locking read: the latest committed
-- row, not the snapshot of a REPEATABLE READ transaction begun earlier.
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
-- agent_fence: while a resource takes its tokens from Redis, its fence token is at most the last
-- token Redis issued for it, as its grants recorded it (none recorded: 0), and a fence moves to
-- 'redis' only at or below that token (a grant records its token first): SQLSTATE FM006, as the
-- lease guard's other refusals. A fence may leave Redis: the database cannot see whether a Redis
-- lease is live (`lease detach --lease-url` asks Redis). Forging the record first, then the
-- fence, is not refused: the same limit as forging the lease row for the built-in service;
-- check --db reports the fence no GRANT event explains (FM413). The record is read with a locking
-- read, as the lease row is.
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
DELIMITER ;


-- == The lease's guards ==

DELIMITER //
-- The monotonic guard of the lease token counter (SQLSTATE FM002).
CREATE TRIGGER IF NOT EXISTS @extschema@_lease_monotonic
BEFORE UPDATE ON @extschema@_lease FOR EACH ROW
BEGIN
    IF NEW.resource <> OLD.resource OR NEW.token < OLD.token THEN
        SIGNAL SQLSTATE 'FM002'
            SET MESSAGE_TEXT = 'the lease token counter is monotonic: lowering or renaming a lease is not allowed';
    END IF;
END//
CREATE TRIGGER IF NOT EXISTS @extschema@_lease_no_delete
BEFORE DELETE ON @extschema@_lease FOR EACH ROW
BEGIN
    SIGNAL SQLSTATE 'FM002'
        SET MESSAGE_TEXT = 'the lease token counter is monotonic: deleting a lease is not allowed';
END//
-- The token domain of lease counters (see agent_fence's).
CREATE TRIGGER IF NOT EXISTS @extschema@_lease_token_domain_insert
BEFORE INSERT ON @extschema@_lease FOR EACH ROW
BEGIN
    IF NEW.token < 0 OR NEW.token > 4611686018427387904 THEN
        SIGNAL SQLSTATE '22003' SET MESSAGE_TEXT = 'lease tokens are integers from 0 to 4611686018427387904';
    END IF;
END//
CREATE TRIGGER IF NOT EXISTS @extschema@_lease_token_domain_update
BEFORE UPDATE ON @extschema@_lease FOR EACH ROW
BEGIN
    IF NEW.token <> OLD.token AND (NEW.token < 0 OR NEW.token > 4611686018427387904) THEN
        SIGNAL SQLSTATE '22003' SET MESSAGE_TEXT = 'lease tokens are integers from 0 to 4611686018427387904';
    END IF;
END//
-- The lease guard (see agent_fence's): a token is never handed to another holder; a new token
-- goes to another holder only when the old lease is no longer live; a grant's token is above the
-- fence token.
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
DELIMITER ;


-- == The Redis grant record's guards ==

DELIMITER //
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


-- == The ledger's triggers ==

DELIMITER //
-- The token domain of ledger rows (see agent_fence's); an adopted row has token 0.
CREATE TRIGGER IF NOT EXISTS @extschema@_applied_revision_token_domain_insert
BEFORE INSERT ON @extschema@_applied_revision FOR EACH ROW
BEGIN
    IF NEW.applied_token < IF(NEW.method = 'adopt', 0, 1) OR NEW.applied_token > 4611686018427387904 THEN
        SIGNAL SQLSTATE '22003' SET MESSAGE_TEXT = 'ledger tokens are integers from 1 to 4611686018427387904';
    END IF;
END//
CREATE TRIGGER IF NOT EXISTS @extschema@_applied_revision_token_domain_update
BEFORE UPDATE ON @extschema@_applied_revision FOR EACH ROW
BEGIN
    IF NEW.applied_token <> OLD.applied_token
       AND (NEW.applied_token < IF(NEW.method = 'adopt', 0, 1) OR NEW.applied_token > 4611686018427387904) THEN
        SIGNAL SQLSTATE '22003' SET MESSAGE_TEXT = 'ledger tokens are integers from 1 to 4611686018427387904';
    END IF;
END//
-- Pre-check mode's ledger writes log their own events, in the same statement's transaction: a
-- revision marked 'applying' that becomes 'applied' is an APPLY; a row marked 'rolling_back' that
-- goes is a ROLLBACK (by the run that marked it). Other ledger writes are logged by the runner.
CREATE TRIGGER IF NOT EXISTS @extschema@_applied_revision_settled
AFTER UPDATE ON @extschema@_applied_revision FOR EACH ROW
BEGIN
    IF OLD.state = 'applying' AND NEW.state = 'applied' THEN
        INSERT INTO @extschema@_fence_event (at, resource, kind, holder, token, revision)
        VALUES (UTC_TIMESTAMP(6), NEW.resource, 'APPLY', NEW.holder, NEW.applied_token, NEW.revision);
    END IF;
END//
-- The ROLLBACK event's detail: @fencemigrate_rollback_detail, which the runner sets (JSON) around
-- the DELETE of a revision whose applied text's downgrade() ran in place of a changed file's.
CREATE TRIGGER IF NOT EXISTS @extschema@_applied_revision_rolled_back
AFTER DELETE ON @extschema@_applied_revision FOR EACH ROW
BEGIN
    IF OLD.state = 'rolling_back' THEN
        INSERT INTO @extschema@_fence_event (at, resource, kind, holder, token, revision, detail)
        VALUES (UTC_TIMESTAMP(6), OLD.resource, 'ROLLBACK', OLD.state_holder, OLD.state_token, OLD.revision,
                @fencemigrate_rollback_detail);
    END IF;
END//
DELIMITER ;


-- == A --sql script's refusals ==

-- A --sql script for the mysql or mariadb client (`fencemigrate upgrade --sql` on MySQL/MariaDB)
-- takes its named locks, its grant and its claims in plain SQL (sql/queries/mysql/script_*.sql):
-- MySQL raises errors only inside stored programs, so a check that does not pass inserts its
-- message here, and this table's trigger raises it (SQLSTATE FM001 for a FENCED refusal, 45000
-- for any other): the statement fails, and the client in batch mode stops there. Nothing is ever
-- stored: every insert is refused. The trigger writes nothing, so the table lends no privilege:
-- the script's grant and claims are plain writes, held to the lease guard and the monotonic guard.
CREATE TABLE IF NOT EXISTS @extschema@_script_refusal (
    message VARCHAR(512) NOT NULL
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;
DELIMITER //
CREATE TRIGGER IF NOT EXISTS @extschema@_script_refusal_raise
BEFORE INSERT ON @extschema@_script_refusal FOR EACH ROW
BEGIN
    DECLARE v_message VARCHAR(512);
    SET v_message = NEW.message;
    IF v_message LIKE 'FENCED%' THEN
        SIGNAL SQLSTATE 'FM001' SET MESSAGE_TEXT = v_message;
    END IF;
    SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = v_message;
END//
DELIMITER ;


-- == The version ==

-- The version of this schema, read by the runner to decide what to install (one row): written
-- last, once every other object is in (MySQL commits each DDL statement on its own).
CREATE TABLE IF NOT EXISTS @extschema@_schema_version (
    one_row TINYINT     NOT NULL PRIMARY KEY,
    version VARCHAR(16) NOT NULL,
    CONSTRAINT @extschema@_schema_version_one_row CHECK (one_row = 1)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;
INSERT IGNORE INTO @extschema@_schema_version (one_row, version) VALUES (1, '1.0');
