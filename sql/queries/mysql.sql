-- fencemigrate's named statements on MySQL and MariaDB, one section each: a `name: <name>` comment line, then
-- the comment lines that say what it does, then the statement (the format aiosql reads). The runner
-- loads a section by name (fencemigrate/queries.py: every line that starts with `--` is dropped,
-- {schema}_<table> becomes the quoted, prefixed table name) and runs it through SQLAlchemy; :name
-- is a bound parameter. The statements SQLite and MySQL share word for word are in prefixed.sql.

-- name: adoption_lock
-- Serialise first runs (and installs) adopting a version table's history until this transaction
-- ends: the fence schema's version row, locked for update, so that only one of them finds the
-- ledger empty.
SELECT version FROM {schema}_schema_version WHERE one_row = 1 FOR UPDATE

-- name: allow_tokenless_writes
-- Opt out: record that :version_table takes writes without a token (its triggers are dropped too).
INSERT IGNORE INTO {schema}_tokenless_writes_allowed (version_table, allowed_at)
VALUES (:version_table, UTC_TIMESTAMP(6))

-- name: applied_source
-- `fencemigrate show REV --applied` and check --db's drift diff: the ledger row of :revision with
-- the text of its file as applied, uncompressed (stored as COMPRESS(text); source NULL: not
-- recorded).
SELECT revision, resource, applied_token, holder, method, applied_at, state, script_sha256,
       CONVERT(UNCOMPRESS(source) USING utf8mb4) AS source
  FROM {schema}_applied_revision
 WHERE version_table = :version_table AND revision = :revision

-- name: begin_apply
-- Pre-check mode, before :revision's DDL: its ledger row, marked 'applying' under :token, written
-- only while the fence still holds :token (0 rows: a newer token has written, FENCED). The
-- revision's first DDL statement commits it before it runs (MySQL commits the open transaction
-- first); the settle_apply statement settles it in the transaction that writes Alembic's version row.
-- A row still 'applying' afterwards is a dirty revision.
INSERT INTO {schema}_applied_revision
       (version_table, revision, resource, applied_token, holder, method, applied_at, script_sha256,
        source, state, state_token, state_holder, state_since)
SELECT :version_table, :revision, :resource, :token, :holder, 'upgrade', UTC_TIMESTAMP(6), :script_sha256,
       COMPRESS(CONVERT(:source USING utf8mb4)), 'applying', :token, :holder, UTC_TIMESTAMP(6)
  FROM {schema}_agent_fence f
 WHERE f.resource = :resource AND f.token = :token
ON DUPLICATE KEY UPDATE
       resource = VALUES(resource), applied_token = VALUES(applied_token), holder = VALUES(holder),
       method = VALUES(method), applied_at = VALUES(applied_at), script_sha256 = VALUES(script_sha256),
       source = VALUES(source),
       state = 'applying', state_token = VALUES(state_token), state_holder = VALUES(state_holder),
       state_since = VALUES(state_since)

-- name: begin_rollback
-- Pre-check mode, before :revision's downgrade DDL: its ledger row marked 'rolling_back' under
-- :token (created for a revision no fenced run recorded), only while the fence still holds
-- :token (0 rows: FENCED). Committed by the DDL's own implicit commit; the settle_rollback statement
-- deletes it in the transaction that writes Alembic's version row.
INSERT INTO {schema}_applied_revision
       (version_table, revision, resource, applied_token, holder, method, applied_at, script_sha256,
        state, state_token, state_holder, state_since)
SELECT :version_table, :revision, :resource, :token, :holder, 'upgrade', UTC_TIMESTAMP(6), NULL,
       'rolling_back', :token, :holder, UTC_TIMESTAMP(6)
  FROM {schema}_agent_fence f
 WHERE f.resource = :resource AND f.token = :token
ON DUPLICATE KEY UPDATE
       state = 'rolling_back', state_token = VALUES(state_token), state_holder = VALUES(state_holder),
       state_since = VALUES(state_since)

-- name: check_fence_objects
-- The fence tables and guard triggers in the current database as information_schema has them,
-- for `fencemigrate check --db`, which compares them with the install script. A trigger's
-- definition is put together from its timing, event, table and body (ACTION_STATEMENT keeps the
-- body as it was written); MySQL has no disabled triggers. :prefix is the fence schema's name
-- and an underscore. One row per object. Triggers are looked up by EVENT_OBJECT_SCHEMA, the
-- column MariaDB can look up (their schema is their table's): a TRIGGER_SCHEMA filter has it open
-- the triggers of every database on the server.
SELECT 'table' AS kind, table_name AS name, NULL AS definition, 1 AS enabled
  FROM information_schema.tables
 WHERE table_schema = DATABASE()
   AND table_type = 'BASE TABLE'
   AND LEFT(table_name, CHAR_LENGTH(:prefix)) = :prefix
UNION ALL
SELECT 'trigger', trigger_name,
       CONCAT('CREATE TRIGGER ', trigger_name, ' ', action_timing, ' ', event_manipulation,
              ' ON ', event_object_table, ' FOR EACH ', action_orientation, ' ', action_statement),
       1
  FROM information_schema.triggers
 WHERE event_object_schema = DATABASE()
   AND LEFT(trigger_name, CHAR_LENGTH(:prefix)) = :prefix
 ORDER BY 1, 2

-- name: claim
-- Claim the fence for :resource with :token, in its own transaction before the run's DDL:
-- 0 rows means a higher token has written (FENCED), that :token is above the fence of a resource
-- whose lease service never issued it (FENCED, see the fence_source statement), or that the resource has no fence row yet
-- (the seed_fence statement). updated_at moves only when the token goes up (MySQL assigns left to right:
-- updated_at is set while token still holds the old value). SQLAlchemy connects with
-- CLIENT_FOUND_ROWS, so a row claimed again under the same token counts as 1.
UPDATE {schema}_agent_fence
   SET updated_at = IF(token < :token, UTC_TIMESTAMP(6), updated_at),
       token = :token
 WHERE resource = :resource AND token <= :token
   AND (token_source = 'external' OR token = :token)

-- name: fence_lock
-- The fence token of :resource for a grant, row locked until it commits (no row: never claimed).
-- The grant holds the resource's named lock already, so no pre-check writer is in flight.
SELECT token FROM {schema}_agent_fence WHERE resource = :resource FOR UPDATE

-- name: forget_revision
-- `fencemigrate resolve REV --as rolled-back`: the dirty row of :revision goes.
DELETE FROM {schema}_applied_revision WHERE version_table = :version_table AND revision = :revision

-- name: forget_tokenless_write
-- `fencemigrate resolve`: the refused writes of :revision are settled.
DELETE FROM {schema}_tokenless_write WHERE version_table = :version_table AND revision = :revision

-- name: grant_fence
-- A grant's fence advance: :resource moves up to the :token its lease service (:source) has just
-- issued, and takes its tokens from that service from now on (0 rows: no fence row yet, see
-- the seed_granted_fence statement). The grant holds the fence row, or the claim lock, already.
UPDATE {schema}_agent_fence
   SET token = :token, token_source = :source, updated_at = UTC_TIMESTAMP(6)
 WHERE resource = :resource AND token < :token

-- name: guard_version_table
-- The guard triggers on Alembic's version table {version_table} (ledger name {version_table_name}, a
-- string literal): a write is refused unless this session holds the named lock of a fenced resource
-- (the named_lock_name statement), as pre-check runs and resolve do. The refused revision is recorded in the
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

-- name: implausible_leases
-- Held leases granted further in the future than their TTL by the server's UTC clock (stepped back
-- since): implausible, counted as expired (the lease_peek statement).
SELECT resource, holder, token, granted_at, ttl_ms
  FROM {schema}_lease
 WHERE holder IS NOT NULL
   AND granted_at > UTC_TIMESTAMP(6) + INTERVAL ttl_ms * 1000 MICROSECOND
 ORDER BY resource

-- name: install_lock
-- Serialise first runs installing the fence schema in this database: the named lock
-- 'fencemigrate-install:<database>', waited for at most :timeout_s seconds (1 when taken).
SELECT GET_LOCK(CONCAT('fencemigrate-install:', DATABASE()), :timeout_s)

-- name: install_unlock
-- Release the install lock taken by the install_lock statement.
SELECT RELEASE_LOCK(CONCAT('fencemigrate-install:', DATABASE()))

-- name: installed_probe
-- Whether the fence schema is installed in the current database: the name of its version table, or no row.
SELECT table_name FROM information_schema.tables
 WHERE table_schema = DATABASE() AND table_name = :table_name

-- name: kill_query
-- A run stopped by SIGTERM/SIGINT: end the statement its session :connection_id is running. The
-- driver cannot cancel it (psycopg can, on PostgreSQL), and the server would otherwise run it to
-- the end, DDL included, after the run has gone and released its lease.
KILL QUERY :connection_id

-- name: lease_grant
-- Grant the lease of :resource to :holder under the new :token, for :ttl_ms by the server's clock.
UPDATE {schema}_lease
   SET holder = :holder, token = :token, ttl_ms = :ttl_ms,
       granted_at = UTC_TIMESTAMP(6),
       expires_at = UTC_TIMESTAMP(6) + INTERVAL (:ttl_ms * 1000) MICROSECOND
 WHERE resource = :resource

-- name: lease_held
-- :holder's grant of :resource (the one with :token, or its current one when NULL), locked and
-- read before lease_renew or lease_release changes it: its token and whether it had expired by
-- the server's clock; no row when the lease is not theirs (MySQL's UPDATE has no RETURNING).
SELECT token, COALESCE(expires_at <= UTC_TIMESTAMP(6), 0) AS was_expired
  FROM {schema}_lease
 WHERE resource = :resource
   AND holder = :holder
   AND token = COALESCE(:token, token)
   FOR UPDATE

-- name: lease_lock
-- The lease row of :resource for a grant, locked until the grant commits; a lease granted further
-- in the future than its TTL is implausible (the lease_peek statement) and counts as expired.
SELECT holder, token, granted_at, expires_at,
       expires_at <= UTC_TIMESTAMP(6)
           OR COALESCE(granted_at > UTC_TIMESTAMP(6) + INTERVAL ttl_ms * 1000 MICROSECOND, 0) AS expired,
       COALESCE(granted_at > UTC_TIMESTAMP(6) + INTERVAL ttl_ms * 1000 MICROSECOND, 0) AS implausible
  FROM {schema}_lease
 WHERE resource = :resource
   FOR UPDATE

-- name: lease_lock_name
-- The name of the named lock every lease transaction (grant, renew, release) on :resource in this
-- database takes first, so that IS_USED_LOCK names the session inside one (InnoDB cannot tell
-- which session holds a row lock): 'fencemigrate-lease:<database>/<resource>', or its SHA-1 when
-- longer than MySQL's 64 characters. Taken before the writers' 'fencemigrate:' lock, never after.
SELECT IF(CHAR_LENGTH(n.name) <= 64, n.name, CONCAT('fencemigrate-lease:', SHA1(n.name))) AS name
  FROM (SELECT CONCAT('fencemigrate-lease:', DATABASE(), '/', :resource) AS name) n

-- name: lease_peek
-- The lease of :resource as the server's UTC clock sees it now, and the fence token (one row even
-- for a resource never leased or fenced). A lease granted further in the future than its TTL (the
-- clock was stepped back since) is implausible, and counts as expired: the fence keeps safety.
SELECT l.holder, COALESCE(l.token, 0) AS token, l.ttl_ms, l.granted_at, l.expires_at,
       COALESCE(l.expires_at <= UTC_TIMESTAMP(6), 0)
           OR COALESCE(l.granted_at > UTC_TIMESTAMP(6) + INTERVAL l.ttl_ms * 1000 MICROSECOND, 0) AS expired,
       COALESCE(l.granted_at > UTC_TIMESTAMP(6) + INTERVAL l.ttl_ms * 1000 MICROSECOND, 0) AS implausible,
       NULL AS replication, f.token AS fence_token
  FROM (SELECT 1 AS one) r
  LEFT JOIN {schema}_lease l ON l.resource = :resource
  LEFT JOIN {schema}_agent_fence f ON f.resource = :resource

-- name: lease_release
-- Free :holder's lease of :resource (the grant with :token, or its current one when NULL); the
-- token counter stays. the lease_held statement locks and reads the grant first.
UPDATE {schema}_lease
   SET holder = NULL, ttl_ms = NULL, granted_at = NULL, expires_at = NULL
 WHERE resource = :resource
   AND holder = :holder
   AND token = COALESCE(:token, token)

-- name: lease_renew
-- Extend :holder's lease of :resource (the grant with :token, or its current one when NULL) by
-- :ttl_ms from now (when NULL, by the TTL it was granted or last renewed with), by the server's
-- clock. A lease stays its holder's until someone else is granted it: renewing after expiry is
-- allowed. the lease_held statement locks and reads the grant first.
UPDATE {schema}_lease
   SET expires_at = UTC_TIMESTAMP(6) + INTERVAL (COALESCE(:ttl_ms, ttl_ms) * 1000) MICROSECOND,
       ttl_ms = COALESCE(:ttl_ms, ttl_ms)
 WHERE resource = :resource
   AND holder = :holder
   AND token = COALESCE(:token, token)

-- name: lease_seed
-- The lease row of :resource, created free with its token counter at 0 on first use (changes
-- nothing when it exists: the no-op update keeps the token, which the monotonic guard allows).
INSERT INTO {schema}_lease (resource, token) VALUES (:resource, 0)
ON DUPLICATE KEY UPDATE token = token

-- name: ledger_exists
-- Whether the ledger has a row of :version_table (none: a database fenced for the first time
-- adopts the revisions its version table applies). A locking read: it sees the latest committed
-- rows, not the transaction's snapshot, so a run that waited for another's adoption sees its rows.
SELECT 1 FROM {schema}_applied_revision WHERE version_table = :version_table LIMIT 1 LOCK IN SHARE MODE

-- name: ledger_rows
-- The ledger of one Alembic version table, oldest first (state.py orders the rows of one
-- applied_at by the event log), with each revision's state ('applied', or 'applying' /
-- 'rolling_back' for a revision whose DDL did not finish).
SELECT revision, resource, applied_token, holder, method, applied_at, script_sha256,
       state, state_token, state_holder, state_since
  FROM {schema}_applied_revision
 WHERE version_table = :version_table
 ORDER BY applied_at, revision

-- name: ledger_seen
-- Whether the ledger has a row of :version_table, read without locking (a consistent read: no
-- wait behind another writer's row locks). Adoption's first look: a run that finds a row is done;
-- one that finds none takes the adoption lock and asks again with the ledger_exists statement's locking read.
SELECT 1 FROM {schema}_applied_revision WHERE version_table = :version_table LIMIT 1

-- name: lock_timeout
-- Bound how long this session waits for a row lock (whole seconds, at least 1): a grant sets it
-- to what is left of --wait.
SET SESSION innodb_lock_wait_timeout = :timeout_s

-- name: locked_fence_source
-- Where the tokens of :resource come from, read by a grant or detach that has locked the fence
-- row already (the fence_lock statement): the committed value, which cannot change before it commits.
-- No row: never claimed nor granted.
SELECT token_source FROM {schema}_agent_fence WHERE resource = :resource FOR UPDATE

-- name: log_event
-- Append one event to the log read by `fencemigrate timeline`; :at is NULL for "now" (the
-- server's UTC clock), or when it happened (UTC).
INSERT INTO {schema}_fence_event (at, resource, kind, holder, token, revision, detail)
VALUES (COALESCE(:at, UTC_TIMESTAMP(6)), :resource, :kind, :holder, :token, :revision, :detail)

-- name: named_lock
-- Take the named lock :name for this session, waiting at most :timeout_s seconds: 1 when taken
-- (also when this session holds it already), 0 on timeout. Held until released or until the
-- session ends, so a writer that dies releases it with its connection.
SELECT GET_LOCK(:name, :timeout_s)

-- name: named_lock_holder
-- The connection id of the session holding the named lock :name (NULL when free).
SELECT IS_USED_LOCK(:name)

-- name: named_lock_name
-- The name of the named lock that serialises fencemigrate writers on :resource in this database:
-- 'fencemigrate:<database>/<resource>', or its SHA-1 when longer than MySQL's 64 characters.
-- Named locks are server-wide, hence the database in the name.
SELECT IF(CHAR_LENGTH(n.name) <= 64, n.name, CONCAT('fencemigrate:', SHA1(n.name))) AS name
  FROM (SELECT CONCAT('fencemigrate:', DATABASE(), '/', :resource) AS name) n

-- name: named_lock_release
-- Release this session's named lock :name (NULL or 0 when it does not hold it).
SELECT RELEASE_LOCK(:name)

-- name: named_lock_session
-- Who holds the named lock :name on :resource: its connection id, what it runs (command, seconds in
-- it, statement), and the pre-check run it is: the holder, token and start of the revision it marked
-- in flight (none before its first revision's mark), else the fence token (its claim, committed
-- under the lock). No row when the lock is free.
SELECT p.ID AS pid, p.COMMAND AS command, p.TIME AS seconds, p.INFO AS info,
       m.state_holder AS holder, COALESCE(m.state_token, f.token) AS token, m.state_since AS since
  FROM information_schema.PROCESSLIST p
  LEFT JOIN (SELECT a.state_holder, a.state_token, a.state_since
               FROM {schema}_applied_revision a
              WHERE a.resource = :resource AND a.state <> 'applied'
              ORDER BY a.state_since DESC LIMIT 1) m ON TRUE
  LEFT JOIN {schema}_agent_fence f ON f.resource = :resource
 WHERE p.ID = IS_USED_LOCK(:name)

-- name: preempt_writer
-- --preempt: end the session :connection_id, a stale pre-check writer holding the resource's
-- named lock. The server rolls back its open transaction and releases the lock; a revision it was
-- running stops midway and stays marked dirty.
KILL CONNECTION :connection_id

-- name: record_adopted
-- Record :revision as adopted: the version table applied it before the database was fenced, so no
-- token applied it (applied_token 0, method 'adopt'); with its file's sha256 and text (compressed,
-- as the record_apply statement) when the file is there. The ADOPT event is logged once for all of them
-- (the log_event statement).
INSERT INTO {schema}_applied_revision
       (version_table, revision, resource, applied_token, holder, method, applied_at, script_sha256, source)
VALUES (:version_table, :revision, :resource, 0, :holder, 'adopt', UTC_TIMESTAMP(6), :script_sha256,
        COMPRESS(CONVERT(:source USING utf8mb4)))

-- name: record_apply
-- Record that :revision was applied under :token, with its file's sha256 and text (compressed: see
-- sql/mysql/fencemigrate--1.0.sql), settling a row written as 'applying' before
-- its DDL (re-applying rewrites the row). Runs in the transaction that writes Alembic's version row.
INSERT INTO {schema}_applied_revision
       (version_table, revision, resource, applied_token, holder, method, applied_at, script_sha256,
        source, state, state_token, state_holder, state_since)
VALUES (:version_table, :revision, :resource, :token, :holder, 'upgrade', UTC_TIMESTAMP(6), :script_sha256,
        COMPRESS(CONVERT(:source USING utf8mb4)), 'applied', NULL, NULL, NULL)
ON DUPLICATE KEY UPDATE
       resource = VALUES(resource), applied_token = VALUES(applied_token), holder = VALUES(holder),
       method = VALUES(method), applied_at = VALUES(applied_at), script_sha256 = VALUES(script_sha256),
       source = VALUES(source),
       state = 'applied', state_token = NULL, state_holder = NULL, state_since = NULL

-- name: record_redis_grant
-- A Redis grant's record of the :token it has just issued for :resource (the table's only writer),
-- in the grant's transaction before its fence advance (the grant_fence statement): the lease guard refuses
-- a fence whose tokens come from Redis above the recorded token. Inserts the row, or raises its
-- token; never lowers it (MySQL assigns left to right: granted_at is set while token still holds
-- the recorded value).
INSERT INTO {schema}_redis_grant (resource, token, granted_at)
VALUES (:resource, :token, UTC_TIMESTAMP(6))
ON DUPLICATE KEY UPDATE
       granted_at = IF(VALUES(token) > token, VALUES(granted_at), granted_at),
       token = GREATEST(token, VALUES(token))

-- name: record_stamp
-- Record that :revision was stamped under :token; a stamp never overwrites the record of a
-- revision that really ran.
INSERT INTO {schema}_applied_revision
       (version_table, revision, resource, applied_token, holder, method, applied_at, script_sha256, source)
SELECT :version_table, :revision, :resource, :token, :holder, 'stamp', UTC_TIMESTAMP(6), :script_sha256,
       COMPRESS(CONVERT(:source USING utf8mb4))
  FROM DUAL
 WHERE NOT EXISTS (SELECT 1 FROM {schema}_applied_revision
                    WHERE version_table = :version_table AND revision = :revision)

-- name: rollback_detail
-- Pre-check mode: the detail (JSON, or NULL) of the ROLLBACK event the ledger's trigger writes when
-- the next the settle_rollback statement deletes a row: set before it, back to NULL after it.
SET @fencemigrate_rollback_detail = :detail

-- name: schema_version
-- The installed fence schema version. A locking read: it sees the latest committed row, not the
-- transaction's snapshot, so a run that waited for another's install reads what that one wrote.
SELECT version FROM {schema}_schema_version WHERE one_row = 1 LOCK IN SHARE MODE

-- name: schema_version_unlocked
-- The installed fence schema version, as this transaction's snapshot has it (no row lock): the
-- check before the install lock. Under the lock the runner reads it with the schema_version statement.
SELECT version FROM {schema}_schema_version WHERE one_row = 1

-- name: script_applied_file_check
-- A --sql script's downgrade of :revision, before its mark: refused unless the database applied
-- the file whose downgrade() the script holds (:script_sha256), or recorded no sha256 of it.
SET @fencemigrate_refusal = IF(
    EXISTS (SELECT 1 FROM {schema}_applied_revision a
             WHERE a.version_table = :version_table AND a.revision = :revision
               AND a.script_sha256 <> :script_sha256),
    'fencemigrate: a revision this script rolls back was applied from another text than the file it rolls it back with: nothing was rolled back. Roll it back with fencemigrate itself, which runs the downgrade() of the text as applied, or write the script again from that text (fencemigrate show REV --applied > FILE)',
    NULL)

-- name: script_claim_check
-- A --sql script written with --token: after its claim (the claim statement, the seed_fence statement), refused when a
-- revision of :resource is dirty (DIRTY), or unless the fence now holds :token (FENCED: a higher
-- token has written, or the resource's lease service never issued it).
SET @fencemigrate_refusal = CASE
    WHEN EXISTS (SELECT 1 FROM {schema}_applied_revision a WHERE a.resource = :resource AND a.state <> 'applied')
    THEN CONCAT('DIRTY: a revision of ', :resource, ' is marked dirty (its DDL started and never finished): ',
                'see fencemigrate state, then fencemigrate resolve; nothing was applied')
    WHEN NOT EXISTS (SELECT 1 FROM {schema}_agent_fence f WHERE f.resource = :resource AND f.token = :token)
    THEN CONCAT('FENCED: a newer token has written to ', :resource, ' since token ', COALESCE(:token, 'NULL'),
                ' was issued (or its lease service never issued it). This is NOT a transient error: do not retry; ',
                're-read the state (fencemigrate state) and re-plan. Nothing was applied')
    ELSE NULL
END

-- name: script_fence_check
-- A --sql script, before a stamp's ledger rows: refused (FENCED) unless the fence of :resource
-- still holds :token.
SET @fencemigrate_refusal = IF(
    EXISTS (SELECT 1 FROM {schema}_agent_fence f WHERE f.resource = :resource AND f.token = :token),
    NULL,
    CONCAT('FENCED: a newer token has written to ', :resource, ' since this script''s token (',
           COALESCE(:token, 'none'), ') was issued. This is NOT a transient error: do not retry; re-read the ',
           'state (fencemigrate state) and re-plan. Nothing after this statement ran'))

-- name: script_grant
-- A --sql script's own grant (its checks passed: the script_grant_check statement), as the built-in lease
-- service grants (fencemigrate/leases/database.py): another holder's lapsed lease is logged EXPIRE
-- (released first when implausible: granted further in the future than its TTL), the next token
-- issued above the lease counter and the fence into @fencemigrate_token, the lease granted to
-- :holder for :ttl_ms by the server's clock, the fence advanced to the token, GRANT logged; then
-- the grant commits and the lease lock is released. Every write goes through the lease guard.
INSERT INTO {schema}_fence_event (at, resource, kind, holder, token, detail)
SELECT IF(x.implausible, UTC_TIMESTAMP(6), x.expires_at), x.resource, 'EXPIRE', x.holder, x.token,
       IF(x.implausible, CONCAT('{"implausible": true, "granted_at": "', x.granted_at, '", "expires_at": "',
                                x.expires_at, '"}'), NULL)
  FROM (SELECT l.resource, l.holder, l.token, l.granted_at, l.expires_at,
               COALESCE(l.granted_at > UTC_TIMESTAMP(6) + INTERVAL l.ttl_ms * 1000 MICROSECOND, 0) AS implausible
          FROM {schema}_lease l
         WHERE l.resource = :resource AND l.holder IS NOT NULL AND l.holder <> :holder) x;
UPDATE {schema}_lease
   SET holder = NULL, ttl_ms = NULL, granted_at = NULL, expires_at = NULL
 WHERE resource = :resource AND holder IS NOT NULL
   AND granted_at > UTC_TIMESTAMP(6) + INTERVAL ttl_ms * 1000 MICROSECOND;
SET @fencemigrate_token = (
    SELECT GREATEST(l.token, COALESCE((SELECT f.token FROM {schema}_agent_fence f WHERE f.resource = :resource), 0)) + 1
      FROM {schema}_lease l WHERE l.resource = :resource);
UPDATE {schema}_lease
   SET holder = :holder, token = @fencemigrate_token, ttl_ms = :ttl_ms,
       granted_at = UTC_TIMESTAMP(6), expires_at = UTC_TIMESTAMP(6) + INTERVAL (:ttl_ms * 1000) MICROSECOND
 WHERE resource = :resource;
UPDATE {schema}_agent_fence
   SET token = @fencemigrate_token, token_source = 'lease service', updated_at = UTC_TIMESTAMP(6)
 WHERE resource = :resource AND token < @fencemigrate_token;
INSERT INTO {schema}_agent_fence (resource, token, updated_at, token_source)
SELECT :resource, @fencemigrate_token, UTC_TIMESTAMP(6), 'lease service' FROM DUAL
 WHERE NOT EXISTS (SELECT 1 FROM {schema}_agent_fence WHERE resource = :resource);
INSERT INTO {schema}_fence_event (at, resource, kind, holder, token, detail)
VALUES (UTC_TIMESTAMP(6), :resource, 'GRANT', :holder, @fencemigrate_token, CONCAT('{"ttl_ms": ', :ttl_ms, '}'));
COMMIT;
DO RELEASE_LOCK((SELECT IF(CHAR_LENGTH(n.name) <= 64, n.name, CONCAT('fencemigrate-lease:', SHA1(n.name)))
                   FROM (SELECT CONCAT('fencemigrate-lease:', DATABASE(), '/', :resource) AS name) n))

-- name: script_grant_check
-- A --sql script's own grant, its checks (the script_grant statement writes it once they pass): in the
-- grant's transaction, under the lease lock and the named lock of :resource, the lease row locked.
-- Refused, in this order: a resource whose tokens come from Redis; a live lease of another holder
-- than :holder (busy at once: the script already waited --wait for the locks); a dirty revision
-- (DIRTY, as pre-check mode); heads other than :heads (sorted, comma-separated; '' for none;
-- @fencemigrate_heads from the script_heads statement), FENCED.
START TRANSACTION;
INSERT INTO {schema}_lease (resource, token) VALUES (:resource, 0) ON DUPLICATE KEY UPDATE token = token;
SELECT l.token INTO @fencemigrate_counter FROM {schema}_lease l WHERE l.resource = :resource FOR UPDATE;
SET @fencemigrate_refusal = CASE
    WHEN EXISTS (SELECT 1 FROM {schema}_agent_fence f WHERE f.resource = :resource AND f.token_source = 'redis')
    THEN CONCAT('fencemigrate: the tokens of ', :resource, ' come from Redis: a script takes its lease from the ',
                'database''s lease service only; write it with --token N from a Redis grant; nothing was applied')
    WHEN EXISTS (SELECT 1 FROM {schema}_lease l
                  WHERE l.resource = :resource AND l.holder IS NOT NULL AND l.holder <> :holder
                    AND l.expires_at > UTC_TIMESTAMP(6)
                    AND NOT COALESCE(l.granted_at > UTC_TIMESTAMP(6) + INTERVAL l.ttl_ms * 1000 MICROSECOND, 0))
    THEN CONCAT('lease on ', :resource, ' is busy: another holder''s lease is live (fencemigrate lease status ',
                'shows it); this is transient, try again later; nothing was applied')
    WHEN EXISTS (SELECT 1 FROM {schema}_applied_revision a WHERE a.resource = :resource AND a.state <> 'applied')
    THEN CONCAT('DIRTY: a revision of ', :resource, ' is marked dirty (its DDL started and never finished): ',
                'see fencemigrate state, then fencemigrate resolve; nothing was applied')
    WHEN NOT (@fencemigrate_heads <=> :heads)
    THEN CONCAT('FENCED: the heads are ', IF(COALESCE(@fencemigrate_heads, '') = '', 'base', @fencemigrate_heads),
                ', not ', IF(:heads = '', 'base', :heads), ', the ones this script was written from (resource ',
                :resource, '). This is NOT a transient error: do not retry; re-read the state (fencemigrate ',
                'state) and re-plan. Nothing was applied')
    ELSE NULL
END

-- name: script_heads
-- A --sql script that takes its own lease reads the heads of its version table (:version_table,
-- quoted; :version_table_name in :version_schema, NULL for the current database) into
-- @fencemigrate_heads, sorted and comma-separated ('' when the table is empty or missing: no
-- trigger can read a table named at run time, so the script reads it itself, with a prepared
-- statement, before Alembic creates it from base).
SET @fencemigrate_heads = NULL;
SET @fencemigrate_read_heads = IF(
    EXISTS (SELECT 1 FROM information_schema.tables t
             WHERE t.table_schema = COALESCE(:version_schema, DATABASE()) AND t.table_name = :version_table_name),
    CONCAT('SELECT COALESCE(GROUP_CONCAT(version_num ORDER BY version_num SEPARATOR '',''), '''') ',
           'INTO @fencemigrate_heads FROM ', :version_table),
    'SET @fencemigrate_heads = ''''');
PREPARE fencemigrate_read_heads FROM @fencemigrate_read_heads;
EXECUTE fencemigrate_read_heads;
DEALLOCATE PREPARE fencemigrate_read_heads

-- name: script_lease_lock
-- A --sql script that takes its own lease: the named lock every lease transaction on :resource
-- takes first (the lease_lock_name statement), waiting at most :wait_s seconds (--wait), as a grant does.
SET @fencemigrate_refusal = IF(
    GET_LOCK((SELECT IF(CHAR_LENGTH(n.name) <= 64, n.name, CONCAT('fencemigrate-lease:', SHA1(n.name)))
                FROM (SELECT CONCAT('fencemigrate-lease:', DATABASE(), '/', :resource) AS name) n), :wait_s) = 1,
    NULL,
    CONCAT('lease on ', :resource, ' is busy: another grant, renew or release of it did not finish within ',
           :wait_s, ' s (--wait); this is transient, try again later; nothing was applied'))

-- name: script_mark_check
-- A --sql script, after marking :revision (the begin_apply statement / the begin_rollback statement) and before its
-- DDL: refused (FENCED) unless the mark is there, :state under :token, and the fence of :resource
-- still holds :token (a newer grant has superseded the script otherwise, and the mark was not written).
SET @fencemigrate_refusal = IF(
    EXISTS (SELECT 1 FROM {schema}_applied_revision a, {schema}_agent_fence f
             WHERE a.version_table = :version_table AND a.revision = :revision
               AND a.state = :state AND a.state_token = :token
               AND f.resource = :resource AND f.token = :token),
    NULL,
    CONCAT('FENCED: a newer token has written to ', :resource, ' since this script''s token (',
           COALESCE(:token, 'none'), ') was issued; ', :revision, ' was not started. This is NOT a transient ',
           'error: do not retry; re-read the state (fencemigrate state) and re-plan'))

-- name: script_named_lock
-- A --sql script's named lock of :resource (the named_lock_name statement), the one pre-check runs hold for
-- their whole run, waiting at most :wait_s seconds (--wait): fencemigrate writers and grants never
-- overlap with the script, and the version table's guard lets the script's version writes through.
SET @fencemigrate_refusal = IF(
    GET_LOCK((SELECT IF(CHAR_LENGTH(n.name) <= 64, n.name, CONCAT('fencemigrate:', SHA1(n.name)))
                FROM (SELECT CONCAT('fencemigrate:', DATABASE(), '/', :resource) AS name) n), :wait_s) = 1,
    NULL,
    CONCAT('busy: another fencemigrate run on ', :resource, ' held its named lock for ', :wait_s,
           ' s (--wait): a migration in flight (fencemigrate state shows it); this is transient, try again ',
           'later; nothing was applied'))

-- name: script_release
-- The end of a --sql script that took its own lease: the lease is released (as the lease_release statement)
-- and RELEASE logged, in one transaction; nothing when the lease is no longer the script's
-- (:holder, @fencemigrate_token).
START TRANSACTION;
INSERT INTO {schema}_fence_event (at, resource, kind, holder, token)
SELECT UTC_TIMESTAMP(6), l.resource, 'RELEASE', l.holder, l.token
  FROM {schema}_lease l
 WHERE l.resource = :resource AND l.holder = :holder AND l.token = @fencemigrate_token
   FOR UPDATE;
UPDATE {schema}_lease
   SET holder = NULL, ttl_ms = NULL, granted_at = NULL, expires_at = NULL
 WHERE resource = :resource AND holder = :holder AND token = @fencemigrate_token;
COMMIT

-- name: script_schema_check
-- A --sql script's first check: the fence schema must be installed at version :major.:minor or
-- later. The refusal is set first and cleared only by a read that finds the version: without the
-- fence schema (or with its script_refusal table dropped) the statements that need it fail, and
-- the refusal stays. The token the script writes under starts unknown (NULL: every claim refuses it).
SET @fencemigrate_token = NULL;
SET @fencemigrate_refusal = CONCAT('fencemigrate: the fence schema is not installed in this database, or is older ',
                                   'than this script needs (', :major, '.', :minor, '): install it (fencemigrate ',
                                   'install) and run the script again; nothing was applied');
SET @fencemigrate_refusal = COALESCE(
    (SELECT IF(CAST(SUBSTRING_INDEX(v.version, '.', 1) AS UNSIGNED) * 1000000
               + CAST(SUBSTRING_INDEX(v.version, '.', -1) AS UNSIGNED) >= :major * 1000000 + :minor,
               '', @fencemigrate_refusal)
       FROM {schema}_schema_version v
      WHERE v.one_row = 1),
    @fencemigrate_refusal);
SET @fencemigrate_refusal = NULLIF(@fencemigrate_refusal, '')

-- name: script_settled_check
-- A --sql script, after :revision's version write and the settle_apply statement / the settle_rollback statement:
-- refused unless the ledger settled it (:applied 1: its row applied under :token; 0: its row gone).
SET @fencemigrate_refusal = IF(
    IF(:applied,
       EXISTS (SELECT 1 FROM {schema}_applied_revision a
                WHERE a.version_table = :version_table AND a.revision = :revision
                  AND a.state = 'applied' AND a.applied_token = :token),
       NOT EXISTS (SELECT 1 FROM {schema}_applied_revision a
                    WHERE a.version_table = :version_table AND a.revision = :revision)),
    NULL,
    CONCAT('fencemigrate: the ledger row of ', :revision, ' is no longer marked by this script (token ',
           COALESCE(:token, 'none'), '): another writer changed it while the revision ran; see fencemigrate state'))

-- name: script_stop
-- A --sql script's stop after each of its checks (script_*_check.sql, which leave their refusal in
-- @fencemigrate_refusal, or NULL when the check passed): the refusal is raised by the fence
-- schema's script_refusal table (its trigger SIGNALs the message), which stops the mysql client in
-- batch mode. Under `--force` the client goes on: the script's session is then killed (KILL of its
-- own CONNECTION_ID(), prepared: no server variable named), the batch client does not reconnect, and
-- every later statement fails; the session's named locks go with it and its open transaction rolls
-- back. A check that could not run at all (a table missing) leaves the refusal it began with.
INSERT INTO {schema}_script_refusal (message)
SELECT @fencemigrate_refusal FROM DUAL WHERE @fencemigrate_refusal IS NOT NULL;
SET @fencemigrate_stop = IF(@fencemigrate_refusal IS NULL, 'DO 0', CONCAT('KILL ', CONNECTION_ID()));
PREPARE fencemigrate_stop FROM @fencemigrate_stop;
EXECUTE fencemigrate_stop;
DEALLOCATE PREPARE fencemigrate_stop

-- name: script_unlock
-- The end of a --sql script: its named lock of :resource (the script_named_lock statement) is released.
DO RELEASE_LOCK((SELECT IF(CHAR_LENGTH(n.name) <= 64, n.name, CONCAT('fencemigrate:', SHA1(n.name)))
                   FROM (SELECT CONCAT('fencemigrate:', DATABASE(), '/', :resource) AS name) n))

-- name: seed_fence
-- The first claim on a resource: its fence row, with :token. 0 rows when the row exists.
INSERT INTO {schema}_agent_fence (resource, token, updated_at)
SELECT :resource, :token, UTC_TIMESTAMP(6) FROM DUAL
 WHERE NOT EXISTS (SELECT 1 FROM {schema}_agent_fence WHERE resource = :resource)

-- name: seed_granted_fence
-- The first grant of a resource never claimed: its fence row, at the :token its lease service
-- (:source) issued. 0 rows when the row exists.
INSERT INTO {schema}_agent_fence (resource, token, token_source, updated_at)
SELECT :resource, :token, :source, UTC_TIMESTAMP(6) FROM DUAL
 WHERE NOT EXISTS (SELECT 1 FROM {schema}_agent_fence WHERE resource = :resource)

-- name: settle_apply
-- Pre-check mode, after :revision's DDL, in the transaction that writes Alembic's version row:
-- the row this run marked 'applying' is applied (the APPLY event is written by the ledger's
-- trigger). 0 rows: the mark is not this run's any more.
UPDATE {schema}_applied_revision
   SET state = 'applied', state_token = NULL, state_holder = NULL, state_since = NULL,
       applied_at = UTC_TIMESTAMP(6)
 WHERE version_table = :version_table AND revision = :revision
   AND state = 'applying' AND state_token = :token

-- name: settle_revision
-- `fencemigrate resolve REV --as applied`: the dirty row of :revision is settled as applied.
UPDATE {schema}_applied_revision
   SET state = 'applied', state_token = NULL, state_holder = NULL, state_since = NULL
 WHERE version_table = :version_table AND revision = :revision AND state <> 'applied'

-- name: settle_rollback
-- Pre-check mode, after :revision's downgrade DDL, in the transaction that writes Alembic's
-- version row: the row this run marked 'rolling_back' goes (the ROLLBACK event is written by the
-- ledger's trigger). 0 rows: the mark is not this run's any more.
DELETE FROM {schema}_applied_revision
 WHERE version_table = :version_table AND revision = :revision
   AND state = 'rolling_back' AND state_token = :token

-- name: stuck_lease_session
-- --preempt: the connection id of the session inside a lease transaction on :resource (holding
-- the lease lock :lock_name) whose client has sent nothing for :idle_s seconds (its process paused or
-- stopped), only while the lease as committed has no live holder (free, or expired by the
-- server's UTC clock); no row otherwise. A live holder's stuck renewal is never named.
SELECT p.ID AS connection_id
  FROM information_schema.PROCESSLIST p
 WHERE p.ID = IS_USED_LOCK(:lock_name)
   AND p.ID <> CONNECTION_ID()
   AND p.COMMAND = 'Sleep'
   AND p.TIME >= :idle_s
   AND NOT EXISTS (SELECT 1 FROM {schema}_lease l
                    WHERE l.resource = :resource AND l.holder IS NOT NULL AND l.expires_at > UTC_TIMESTAMP(6))

-- name: timeline_events
-- The event log for `fencemigrate timeline`, oldest first: every resource, or only :resource;
-- from :since_at (UTC) on, or from :since_ms milliseconds ago by the server's clock (NULL: no limit).
SELECT id, at, resource, kind, holder, token, revision, detail
  FROM {schema}_fence_event
 WHERE (:resource IS NULL OR resource = :resource)
   AND (:since_at IS NULL OR at >= :since_at)
   AND (:since_ms IS NULL OR at >= UTC_TIMESTAMP(6) - INTERVAL (:since_ms * 1000) MICROSECOND)
 ORDER BY at, id

-- name: tokenless_writes
-- Dirty revisions left by refused writes without a token (the guard_version_table statement), oldest first:
-- the latest refused write of each revision.
SELECT w.version_table, w.revision, w.state, w.at
  FROM {schema}_tokenless_write w
 WHERE w.id = (SELECT MAX(v.id) FROM {schema}_tokenless_write v
                WHERE v.version_table = w.version_table AND v.revision = w.revision)
 ORDER BY w.at, w.revision

-- name: unguard_version_table
-- Remove the guard triggers of Alembic's version table (the guard_version_table statement names them).
DROP TRIGGER IF EXISTS {insert_guard}//
DROP TRIGGER IF EXISTS {update_guard}//
DROP TRIGGER IF EXISTS {delete_guard}//

-- name: unsettled_revisions
-- The dirty revisions of :resource: ledger rows whose DDL started in pre-check mode and never
-- finished ('applying' or 'rolling_back'), oldest first.
SELECT version_table, revision, state, state_token, state_holder, state_since
  FROM {schema}_applied_revision
 WHERE resource = :resource AND state <> 'applied'
 ORDER BY state_since, revision

-- name: version_guard_state
-- How writes without a token are treated on the version table :table_name (ledger name
-- :version_table): allowed (opted out, since when), guarded (its insert trigger :insert_trigger is
-- on it), whether the version table exists, and the other table that holds a trigger named as one
-- of its guards (:insert_trigger, :update_trigger, :delete_trigger), if any: a version table
-- renamed or copied keeps its triggers, and their names then cannot guard the new one. In the
-- current database, looked up by the columns MariaDB can look up (as check_fence_objects).
SELECT (SELECT a.allowed_at FROM {schema}_tokenless_writes_allowed a
         WHERE a.version_table = :version_table) AS allowed_at,
       EXISTS (SELECT 1 FROM information_schema.triggers t
                WHERE t.event_object_schema = DATABASE() AND t.event_object_table = :table_name
                  AND t.trigger_name = :insert_trigger) AS guarded,
       EXISTS (SELECT 1 FROM information_schema.tables t
                WHERE t.table_schema = DATABASE() AND t.table_name = :table_name) AS table_exists,
       (SELECT MIN(t.event_object_table) FROM information_schema.triggers t
         WHERE t.event_object_schema = DATABASE() AND t.event_object_table <> :table_name
           AND t.trigger_name IN (:insert_trigger, :update_trigger, :delete_trigger)) AS names_taken_by
