-- fencemigrate 0.3 -> 0.4 on MySQL and MariaDB: a hardened fence (issue 12).
--
-- The runner applies this file one statement at a time (DELIMITER lines work as in the mysql
-- client), under the install named lock: after sql/mysql/fencemigrate--0.3.sql on a fresh
-- install, on its own on a database at 0.3.

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
