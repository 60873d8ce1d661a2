-- fencemigrate 0.3 -> 0.4 on MySQL and MariaDB: a hardened fence (issue 12).
--
-- The runner applies this file one statement at a time (DELIMITER lines work as in the mysql
-- client), under the install named lock, on a database at 0.3 (a fresh install runs the current
-- version's full script instead).

-- == token sources and the token domain (issue 12, defect 3) ==
-- Where a resource's tokens come from: 'external' (a harness's own leases pass --token; the first
-- claim seeds its row so), 'lease service' (built in) or 'redis'. A grant advances the fence to
-- the token it issued and sets the source (grant_fence.sql), so on a leased resource the fence
-- token is the last token issued, and claim.sql refuses any higher token (FENCED: never issued).
-- Rows of databases updated from 0.3: the source of their last grant, if any.
ALTER TABLE @extschema@_agent_fence
    ADD COLUMN token_source VARCHAR(16) NOT NULL DEFAULT 'external',
    ADD CONSTRAINT @extschema@_agent_fence_token_source
        CHECK (token_source IN ('external', 'lease service', 'redis'));
UPDATE @extschema@_agent_fence f
  JOIN (SELECT e.resource, e.detail FROM @extschema@_fence_event e
         WHERE e.kind = 'GRANT'
           AND e.id = (SELECT MAX(l.id) FROM @extschema@_fence_event l
                        WHERE l.resource = e.resource AND l.kind = 'GRANT')) g
    ON g.resource = f.resource
   SET f.token_source = IF(g.detail LIKE '%"lease_service": "redis"%', 'redis', 'lease service');

-- Tokens are 1 .. 2^62 (4611686018427387904; lease counters from 0): a grant issues one above
-- the fence, which must not overflow. Triggers, checked on every write: rows already there
-- (written with 2^63-1 before 0.4) stay readable, and their next grant is refused cleanly.
DELIMITER //
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
CREATE TRIGGER IF NOT EXISTS @extschema@_applied_revision_token_domain_insert
BEFORE INSERT ON @extschema@_applied_revision FOR EACH ROW
BEGIN
    IF NEW.applied_token < 1 OR NEW.applied_token > 4611686018427387904 THEN
        SIGNAL SQLSTATE '22003' SET MESSAGE_TEXT = 'ledger tokens are integers from 1 to 4611686018427387904';
    END IF;
END//
CREATE TRIGGER IF NOT EXISTS @extschema@_applied_revision_token_domain_update
BEFORE UPDATE ON @extschema@_applied_revision FOR EACH ROW
BEGIN
    IF NEW.applied_token <> OLD.applied_token AND (NEW.applied_token < 1 OR NEW.applied_token > 4611686018427387904) THEN
        SIGNAL SQLSTATE '22003' SET MESSAGE_TEXT = 'ledger tokens are integers from 1 to 4611686018427387904';
    END IF;
END//
DELIMITER ;
-- == end of token sources (issue 12, defect 3) ==

-- == Writes without a token (issue 12, defect 5) ==
-- Once a database is fenced, Alembic's version table refuses writes from a session that holds no
-- fencemigrate named lock (pre-check mode and `resolve` hold it for their whole run): triggers
-- created per version table from sql/queries/mysql/guard_version_table.sql. MySQL has already
-- committed the revision's DDL by then, so the refused write is recorded here as a dirty revision:
-- this table is MyISAM, not transactional, so the row stays although the refused statement is
-- rolled back. `fencemigrate resolve` settles it like any dirty revision.
CREATE TABLE IF NOT EXISTS @extschema@_tokenless_write (
    id            BIGINT       NOT NULL AUTO_INCREMENT PRIMARY KEY,
    at            DATETIME(6)  NOT NULL,
    version_table VARCHAR(255) NOT NULL,
    revision      VARCHAR(255) NOT NULL,
    state         VARCHAR(16)  NOT NULL
) ENGINE = MyISAM DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

-- Version tables whose guard was removed on purpose (fencemigrate install --allow-tokenless-writes).
CREATE TABLE IF NOT EXISTS @extschema@_tokenless_writes_allowed (
    version_table VARCHAR(255) NOT NULL PRIMARY KEY,
    allowed_at    DATETIME(6)  NOT NULL
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

UPDATE @extschema@_schema_version SET version = '0.4' WHERE one_row = 1;
