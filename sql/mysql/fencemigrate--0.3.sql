-- fencemigrate 0.3 on MySQL and MariaDB: the fence schema as it first shipped (a fresh install
-- now runs the current version's full script, fencemigrate--0.5.sql; this file and the update
-- scripts after it are how a database installed at 0.3 got to the current version).
--
-- MySQL's schemas are databases, and a migration user may not create databases: every object
-- lives in the application's own database, named with the fence schema's name as a prefix
-- (@extschema@_agent_fence becomes `fencemigrate_agent_fence` by default; fencemigrate_schema
-- in alembic.ini changes the prefix). The runner applies this file one statement at a time
-- (DELIMITER lines work as in the mysql client) at the start of the first fenced run, under the
-- named lock 'fencemigrate-install:<database>'; every statement is idempotent. Same tables and columns as the PostgreSQL schema, plus the ledger's
-- `state`: MySQL commits DDL implicitly, so a revision runs in pre-check mode and its ledger row
-- is written as 'applying' (or 'rolling_back') before its DDL and settled after it. A row left
-- unsettled is a dirty revision: fenced writes are refused until `fencemigrate resolve`.
-- Times are UTC (UTC_TIMESTAMP(6)), written by the statements in sql/queries/mysql/.

-- One row per fenced resource: the highest token that has ever written to it.
CREATE TABLE IF NOT EXISTS @extschema@_agent_fence (
    resource   VARCHAR(255) NOT NULL PRIMARY KEY,
    token      BIGINT       NOT NULL,
    updated_at DATETIME(6)  NOT NULL,
    CONSTRAINT @extschema@_agent_fence_resource CHECK (resource <> ''),
    CONSTRAINT @extschema@_agent_fence_token CHECK (token > 0)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

-- One row per revision applied (or stamped) by a fenced run, per Alembic version table.
-- Re-applying a revision is legal only under the token that applied it. state is 'applied'
-- once the revision's DDL and Alembic's version row are in; 'applying' / 'rolling_back' while
-- its DDL runs (state_token: the token of the run that started it, state_since: when).
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
    PRIMARY KEY (version_table, revision),
    KEY @extschema@_applied_revision_unsettled (resource, state),
    CONSTRAINT @extschema@_applied_revision_token CHECK (applied_token > 0),
    CONSTRAINT @extschema@_applied_revision_method CHECK (method IN ('upgrade', 'stamp')),
    CONSTRAINT @extschema@_applied_revision_state
        CHECK (state IN ('applied', 'applying', 'rolling_back')),
    CONSTRAINT @extschema@_applied_revision_settled
        CHECK ((state = 'applied') = (state_token IS NULL))
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
                        'STAMP', 'ROLLBACK', 'FENCED', 'RESOLVE'))
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

-- The monotonic guard: no client, fencemigrate or not, can lower a fence token, rename a
-- fenced resource or delete a fence row; the same for the lease token counter. SQLSTATE
-- FM002, as on PostgreSQL. (TRUNCATE and DROP fire no triggers on MySQL: the guard protects
-- against mistakes and stale writers, not against someone with DROP privilege.)
DELIMITER //
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
CREATE TRIGGER IF NOT EXISTS @extschema@_applied_revision_rolled_back
AFTER DELETE ON @extschema@_applied_revision FOR EACH ROW
BEGIN
    IF OLD.state = 'rolling_back' THEN
        INSERT INTO @extschema@_fence_event (at, resource, kind, holder, token, revision)
        VALUES (UTC_TIMESTAMP(6), OLD.resource, 'ROLLBACK', OLD.state_holder, OLD.state_token, OLD.revision);
    END IF;
END//
DELIMITER ;

-- The version of this schema, read by the runner to decide what to install (one row).
CREATE TABLE IF NOT EXISTS @extschema@_schema_version (
    one_row TINYINT     NOT NULL PRIMARY KEY,
    version VARCHAR(16) NOT NULL,
    CONSTRAINT @extschema@_schema_version_one_row CHECK (one_row = 1)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;
INSERT IGNORE INTO @extschema@_schema_version (one_row, version) VALUES (1, '0.3');
