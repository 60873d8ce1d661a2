-- The guard triggers on Alembic's version table {version_table} (ledger name {version_table_name}, a
-- string literal): a write is refused unless this session holds the named lock of a fenced resource
-- (named_lock_name.sql), as pre-check runs and resolve do. The refused revision is recorded in the
-- MyISAM table tokenless_write, which the refused statement's rollback leaves alone: MySQL has
-- committed its DDL already, so it is dirty. {insert_guard}, {update_guard} and {delete_guard} are
-- the triggers' names. The runner splits this file at the delimiter //.
CREATE TRIGGER IF NOT EXISTS {insert_guard} BEFORE INSERT ON {version_table} FOR EACH ROW
BEGIN
    IF NOT EXISTS (SELECT 1 FROM {schema}_agent_fence f
                   WHERE IS_USED_LOCK(IF(CHAR_LENGTH(CONCAT('fencemigrate:', DATABASE(), '/', f.resource)) <= 64,
                                         CONCAT('fencemigrate:', DATABASE(), '/', f.resource),
                                         CONCAT('fencemigrate:', SHA1(CONCAT('fencemigrate:', DATABASE(), '/', f.resource)))))
                         = CONNECTION_ID()) THEN
        INSERT INTO {schema}_tokenless_write (at, version_table, revision, state)
        VALUES (UTC_TIMESTAMP(6), {version_table_name}, NEW.version_num, 'applying');
        SIGNAL SQLSTATE 'FM005' SET MESSAGE_TEXT = 'fencemigrate refused a version-table write without a fencing token: migrate with fencemigrate; the revision is now dirty';
    END IF;
END//
CREATE TRIGGER IF NOT EXISTS {update_guard} BEFORE UPDATE ON {version_table} FOR EACH ROW
BEGIN
    IF NOT EXISTS (SELECT 1 FROM {schema}_agent_fence f
                   WHERE IS_USED_LOCK(IF(CHAR_LENGTH(CONCAT('fencemigrate:', DATABASE(), '/', f.resource)) <= 64,
                                         CONCAT('fencemigrate:', DATABASE(), '/', f.resource),
                                         CONCAT('fencemigrate:', SHA1(CONCAT('fencemigrate:', DATABASE(), '/', f.resource)))))
                         = CONNECTION_ID()) THEN
        -- Moving to a revision the ledger has is a downgrade (the old one is rolled back); else an upgrade.
        IF EXISTS (SELECT 1 FROM {schema}_applied_revision a
                    WHERE a.version_table = {version_table_name} AND a.revision = NEW.version_num) THEN
            INSERT INTO {schema}_tokenless_write (at, version_table, revision, state)
            VALUES (UTC_TIMESTAMP(6), {version_table_name}, OLD.version_num, 'rolling_back');
        ELSE
            INSERT INTO {schema}_tokenless_write (at, version_table, revision, state)
            VALUES (UTC_TIMESTAMP(6), {version_table_name}, NEW.version_num, 'applying');
        END IF;
        SIGNAL SQLSTATE 'FM005' SET MESSAGE_TEXT = 'fencemigrate refused a version-table write without a fencing token: migrate with fencemigrate; the revision is now dirty';
    END IF;
END//
CREATE TRIGGER IF NOT EXISTS {delete_guard} BEFORE DELETE ON {version_table} FOR EACH ROW
BEGIN
    IF NOT EXISTS (SELECT 1 FROM {schema}_agent_fence f
                   WHERE IS_USED_LOCK(IF(CHAR_LENGTH(CONCAT('fencemigrate:', DATABASE(), '/', f.resource)) <= 64,
                                         CONCAT('fencemigrate:', DATABASE(), '/', f.resource),
                                         CONCAT('fencemigrate:', SHA1(CONCAT('fencemigrate:', DATABASE(), '/', f.resource)))))
                         = CONNECTION_ID()) THEN
        INSERT INTO {schema}_tokenless_write (at, version_table, revision, state)
        VALUES (UTC_TIMESTAMP(6), {version_table_name}, OLD.version_num, 'rolling_back');
        SIGNAL SQLSTATE 'FM005' SET MESSAGE_TEXT = 'fencemigrate refused a version-table write without a fencing token: migrate with fencemigrate; the revision is now dirty';
    END IF;
END//
