-- fencemigrate 0.7 -> 0.8 on MySQL and MariaDB: the ledger adopts the revisions a database had
-- applied before it was fenced (issue 25, item 3): method 'adopt', applied_token 0, and one ADOPT
-- event for all of them; and the table whose trigger raises a --sql script's refusals.
--
-- The runner applies this file one statement at a time (DELIMITER lines work as in the mysql
-- client), under the install named lock, on a database at 0.7 (a fresh install runs the current
-- version's full script instead).

ALTER TABLE @extschema@_applied_revision
    DROP CONSTRAINT @extschema@_applied_revision_token,
    DROP CONSTRAINT @extschema@_applied_revision_method;
ALTER TABLE @extschema@_applied_revision
    ADD CONSTRAINT @extschema@_applied_revision_token
        CHECK (CASE WHEN method = 'adopt' THEN applied_token = 0 ELSE applied_token > 0 END),
    ADD CONSTRAINT @extschema@_applied_revision_method CHECK (method IN ('upgrade', 'stamp', 'adopt'));
ALTER TABLE @extschema@_fence_event
    DROP CONSTRAINT @extschema@_fence_event_kind;
ALTER TABLE @extschema@_fence_event
    ADD CONSTRAINT @extschema@_fence_event_kind
        CHECK (kind IN ('GRANT', 'RENEW', 'RELEASE', 'EXPIRE', 'PREEMPT', 'LOST', 'APPLY',
                        'STAMP', 'ROLLBACK', 'UNSTAMP', 'FENCED', 'RESOLVE', 'ADOPT'));

DROP TRIGGER IF EXISTS @extschema@_applied_revision_token_domain_insert;
DROP TRIGGER IF EXISTS @extschema@_applied_revision_token_domain_update;
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
DELIMITER ;

-- A rollback that ran the applied text's downgrade() in place of a changed file's says so in its
-- ROLLBACK event's detail, which the runner sets in @fencemigrate_rollback_detail around the DELETE.
DROP TRIGGER IF EXISTS @extschema@_applied_revision_rolled_back;
DELIMITER //
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

UPDATE @extschema@_schema_version SET version = '0.8' WHERE one_row = 1;
