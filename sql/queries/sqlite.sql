-- fencemigrate's named statements on SQLite, one section each: a `name: <name>` comment line, then the comment
-- lines that say what it does, then the statement (the format aiosql reads). The runner loads a
-- section by name (fencemigrate/queries.py: every line that starts with `--` is dropped,
-- {schema}_<table> becomes the quoted, prefixed table name) and runs it through SQLAlchemy; :name
-- is a bound parameter. The statements SQLite and MySQL share word for word are in prefixed.sql.

-- name: adoption_lock
-- Serialise first runs (and installs) adopting a version table's history until this transaction
-- ends: a write takes the database's write lock now, so that only one of them finds the ledger
-- empty (the row is left as it is).
UPDATE {schema}_schema_version SET version = version WHERE one_row = 1

-- name: allow_tokenless_writes
-- Opt out: record that :version_table takes writes without a token (its triggers are dropped too).
INSERT OR IGNORE INTO {schema}_tokenless_writes_allowed (version_table) VALUES (:version_table)

-- name: applied_source
-- `fencemigrate show REV --applied` and check --db's drift diff: the ledger row of :revision with
-- the text of its file as applied (source NULL: not recorded).
SELECT revision, resource, applied_token, holder, method, applied_at, 'applied' AS state, script_sha256, source
  FROM {schema}_applied_revision
 WHERE version_table = :version_table AND revision = :revision

-- name: busy_timeout
-- How long this connection waits for SQLite's write lock (milliseconds): its busy timeout.
PRAGMA busy_timeout

-- name: check_fence_objects
-- The fence tables and triggers as sqlite_master has them, for `fencemigrate check --db`, which
-- compares them with the install script (SQLite keeps each one's CREATE statement as written,
-- without IF NOT EXISTS). :prefix is the fence schema's name and an underscore.
SELECT type AS kind, name, sql AS definition, 1 AS enabled
  FROM sqlite_master
 WHERE type IN ('table', 'trigger')
   AND substr(name, 1, length(:prefix)) = :prefix
 ORDER BY type, name

-- name: claim
-- Claim the fence for :resource with :token, in the migration's own transaction before its DDL:
-- 0 rows means a higher token has written (FENCED), that :token is above the fence of a resource
-- whose lease service never issued it (FENCED, see the fence_source statement), or that the resource has no fence row yet
-- (the seed_fence statement). updated_at moves only when the token goes up.
UPDATE {schema}_agent_fence
   SET token = :token,
       updated_at = iif(token < :token, strftime('%Y-%m-%dT%H:%M:%fZ', 'now'), updated_at)
 WHERE resource = :resource AND token <= :token
   AND (token_source = 'external' OR token = :token)

-- name: clear_version_write
-- The fenced run has written Alembic's version table: tokenless writes are refused again.
DELETE FROM {schema}_version_write_claim

-- name: clock_lead
-- How far SQLite's clock (the system clock of the machine running this process) is ahead of the
-- newest event in the fence event log, in days, and that event's time (NULLs: no event yet).
SELECT julianday('now') - julianday(max(at)) AS days_ahead, max(at) AS newest,
       strftime('%Y-%m-%dT%H:%M:%fZ', 'now') AS now
  FROM {schema}_fence_event

-- name: fence_lock
-- The fence token of :resource for a grant (no row: never claimed). No row lock on SQLite: the
-- grant's BEGIN IMMEDIATE holds the database's only write lock, so no migration is in flight.
SELECT token FROM {schema}_agent_fence WHERE resource = :resource

-- name: grant_fence
-- A grant's fence advance: :resource moves up to the :token its lease service (:source) has just
-- issued, and takes its tokens from that service from now on (0 rows: no fence row yet, see
-- the seed_granted_fence statement). The grant holds the fence row, or the claim lock, already.
UPDATE {schema}_agent_fence
   SET token = :token, token_source = :source, updated_at = strftime('%Y-%m-%dT%H:%M:%fZ', 'now')
 WHERE resource = :resource AND token < :token

-- name: guard_version_table
-- The guard triggers on Alembic's version table {version_table}: a write is refused unless a fenced
-- run marked it (the mark_version_write statement, in the same transaction). {insert_guard}, {update_guard}
-- and {delete_guard} are the triggers' names.
CREATE TRIGGER IF NOT EXISTS {insert_guard} BEFORE INSERT ON {version_table}
FOR EACH ROW WHEN NOT EXISTS (SELECT 1 FROM {schema}_version_write_claim)
BEGIN
    SELECT RAISE(ABORT, 'fencemigrate refused this write to the Alembic version table: it carries no fencing token (no fenced run made it), so it was not applied. Migrate this database with fencemigrate (upgrade, downgrade, stamp: with --token N, or let it take a lease), not with plain alembic; to allow tokenless writes on purpose, run `fencemigrate install --allow-tokenless-writes`.');
END;
CREATE TRIGGER IF NOT EXISTS {update_guard} BEFORE UPDATE ON {version_table}
FOR EACH ROW WHEN NOT EXISTS (SELECT 1 FROM {schema}_version_write_claim)
BEGIN
    SELECT RAISE(ABORT, 'fencemigrate refused this write to the Alembic version table: it carries no fencing token (no fenced run made it), so it was not applied. Migrate this database with fencemigrate (upgrade, downgrade, stamp: with --token N, or let it take a lease), not with plain alembic; to allow tokenless writes on purpose, run `fencemigrate install --allow-tokenless-writes`.');
END;
CREATE TRIGGER IF NOT EXISTS {delete_guard} BEFORE DELETE ON {version_table}
FOR EACH ROW WHEN NOT EXISTS (SELECT 1 FROM {schema}_version_write_claim)
BEGIN
    SELECT RAISE(ABORT, 'fencemigrate refused this write to the Alembic version table: it carries no fencing token (no fenced run made it), so it was not applied. Migrate this database with fencemigrate (upgrade, downgrade, stamp: with --token N, or let it take a lease), not with plain alembic; to allow tokenless writes on purpose, run `fencemigrate install --allow-tokenless-writes`.');
END;

-- name: implausible_leases
-- Held leases granted further in the future than their TTL by SQLite's clock (a writer whose clock
-- was ahead): implausible, counted as expired (the lease_peek statement).
SELECT resource, holder, token, granted_at, ttl_ms
  FROM {schema}_lease
 WHERE holder IS NOT NULL
   AND granted_at > strftime('%Y-%m-%dT%H:%M:%fZ', 'now', '+' || (ttl_ms / 1000.0) || ' seconds')
 ORDER BY resource

-- name: installed_probe
-- Whether the fence schema is installed: the name of its version table, or no row.
SELECT name FROM sqlite_master WHERE type = 'table' AND name = :table_name

-- name: lease_grant
-- Grant the lease of :resource to :holder under the new :token, for :ttl_ms by SQLite's clock.
UPDATE {schema}_lease
   SET holder = :holder, token = :token, ttl_ms = :ttl_ms,
       granted_at = strftime('%Y-%m-%dT%H:%M:%fZ', 'now'),
       expires_at = strftime('%Y-%m-%dT%H:%M:%fZ', 'now', '+' || (:ttl_ms / 1000.0) || ' seconds')
 WHERE resource = :resource

-- name: lease_held
-- :holder's grant of :resource (the one with :token, or its current one when NULL), read before
-- lease_renew or lease_release changes it: its token and whether it had expired by SQLite's
-- clock; no row when the lease is not theirs. (PostgreSQL's statements return this themselves;
-- SQLite has RETURNING only from 3.35. The transaction holds the write lock, so nothing can
-- change the row between this read and the write.)
SELECT token, coalesce(expires_at <= strftime('%Y-%m-%dT%H:%M:%fZ', 'now'), 0) AS was_expired
  FROM {schema}_lease
 WHERE resource = :resource
   AND holder = :holder
   AND token = coalesce(:token, token)

-- name: lease_lock
-- The lease row of :resource for a grant, read again. No row lock on SQLite: the grant's
-- BEGIN IMMEDIATE already holds the database's only write lock until it commits. A lease granted
-- further in the future than its TTL is implausible (the lease_peek statement) and counts as expired.
SELECT holder, token, granted_at, expires_at,
       expires_at <= strftime('%Y-%m-%dT%H:%M:%fZ', 'now')
           OR coalesce(granted_at > strftime('%Y-%m-%dT%H:%M:%fZ', 'now', '+' || (ttl_ms / 1000.0) || ' seconds'), 0)
           AS expired,
       coalesce(granted_at > strftime('%Y-%m-%dT%H:%M:%fZ', 'now', '+' || (ttl_ms / 1000.0) || ' seconds'), 0)
           AS implausible
  FROM {schema}_lease
 WHERE resource = :resource

-- name: lease_peek
-- The lease of :resource as SQLite's clock sees it now, and the fence token (one row even for a
-- resource never leased or fenced). Times are ISO-8601 UTC text of one form, so they compare as text.
-- A lease granted further in the future than its TTL (a writer whose clock was ahead: SQLite's
-- clock is each writer's own) is implausible, and counts as expired: the fence keeps safety.
SELECT l.holder, coalesce(l.token, 0) AS token, l.ttl_ms, l.granted_at, l.expires_at,
       coalesce(l.expires_at <= strftime('%Y-%m-%dT%H:%M:%fZ', 'now'), 0)
           OR coalesce(l.granted_at > strftime('%Y-%m-%dT%H:%M:%fZ', 'now', '+' || (l.ttl_ms / 1000.0) || ' seconds'), 0)
           AS expired,
       coalesce(l.granted_at > strftime('%Y-%m-%dT%H:%M:%fZ', 'now', '+' || (l.ttl_ms / 1000.0) || ' seconds'), 0)
           AS implausible,
       NULL AS replication, f.token AS fence_token
  FROM (SELECT :resource AS resource) r
  LEFT JOIN {schema}_lease l ON l.resource = r.resource
  LEFT JOIN {schema}_agent_fence f ON f.resource = r.resource

-- name: lease_release
-- Free :holder's lease of :resource (the grant with :token, or its current one when NULL); the
-- token counter stays. the lease_held statement reads the grant first.
UPDATE {schema}_lease
   SET holder = NULL, ttl_ms = NULL, granted_at = NULL, expires_at = NULL
 WHERE resource = :resource
   AND holder = :holder
   AND token = coalesce(:token, token)

-- name: lease_renew
-- Extend :holder's lease of :resource (the grant with :token, or its current one when NULL) by
-- :ttl_ms from now (when NULL, by the TTL it was granted or last renewed with), by SQLite's
-- clock. A lease stays its holder's until someone else is granted it: renewing after expiry is
-- allowed. the lease_held statement reads the grant first.
UPDATE {schema}_lease
   SET ttl_ms = coalesce(:ttl_ms, ttl_ms),
       expires_at = strftime('%Y-%m-%dT%H:%M:%fZ', 'now',
                             '+' || (coalesce(:ttl_ms, ttl_ms) / 1000.0) || ' seconds')
 WHERE resource = :resource
   AND holder = :holder
   AND token = coalesce(:token, token)

-- name: lease_seed
-- The lease row of :resource, created free with its token counter at 0 on first use (0 rows when
-- it exists). Not ON CONFLICT DO NOTHING: the monotonic guard's BEFORE INSERT trigger would refuse
-- an insert of token 0 beside an existing row before the conflict is seen.
INSERT INTO {schema}_lease (resource, token)
SELECT :resource, 0
 WHERE NOT EXISTS (SELECT 1 FROM {schema}_lease WHERE resource = :resource)

-- name: ledger_exists
-- Whether the ledger has a row of :version_table (none: a database fenced for the first time
-- adopts the revisions its version table applies).
SELECT 1 FROM {schema}_applied_revision WHERE version_table = :version_table LIMIT 1

-- name: ledger_rows
-- The ledger of one Alembic version table, oldest first (state.py orders the rows of one
-- applied_at by the event log).
SELECT revision, resource, applied_token, holder, method, applied_at, script_sha256
  FROM {schema}_applied_revision
 WHERE version_table = :version_table
 ORDER BY applied_at, revision

-- name: ledger_seen
-- Whether the ledger has a row of :version_table: adoption's first look, before its lock (the same
-- read as the ledger_exists statement, which asks again under the lock).
SELECT 1 FROM {schema}_applied_revision WHERE version_table = :version_table LIMIT 1

-- name: lock_timeout
-- Bound how long this connection waits for SQLite's write lock (milliseconds). A connection
-- setting, not a statement of the transaction: a grant sets it to what is left of --wait right
-- before its BEGIN IMMEDIATE (the wait for every other writer: a migration in flight, another
-- grant), and back to the busy_timeout statement's value right after. PRAGMA takes no bound parameters:
-- :timeout_ms is written into the statement as an integer literal.
PRAGMA busy_timeout = :timeout_ms

-- name: locked_fence_source
-- Where the tokens of :resource come from, read by a grant or detach that holds the database's
-- write lock already (its BEGIN IMMEDIATE): no other writer can change it before it commits.
-- No row: never claimed nor granted.
SELECT token_source FROM {schema}_agent_fence WHERE resource = :resource

-- name: log_event
-- Append one event to the log read by `fencemigrate timeline`; :at is NULL for "now" (SQLite's
-- clock), or when it happened as ISO-8601 UTC text ('2026-11-29T14:26:00.000Z').
INSERT INTO {schema}_fence_event (at, resource, kind, holder, token, revision, detail)
VALUES (coalesce(:at, strftime('%Y-%m-%dT%H:%M:%fZ', 'now')), :resource, :kind, :holder, :token, :revision, :detail)

-- name: mark_version_write
-- A fenced run is about to write Alembic's version table in this transaction (see
-- the guard_version_table statement); cleared by the clear_version_write statement right after the write.
INSERT OR IGNORE INTO {schema}_version_write_claim (one_row) VALUES (1)

-- name: record_adopted
-- Record :revision as adopted: the version table applied it before the database was fenced, so no
-- token applied it (applied_token 0, method 'adopt'); with its file's sha256 and text when the file
-- is there. The ADOPT event is logged once for all of them (the log_event statement).
INSERT INTO {schema}_applied_revision
       (version_table, revision, resource, applied_token, holder, method, script_sha256, source)
VALUES (:version_table, :revision, :resource, 0, :holder, 'adopt', :script_sha256, :source)

-- name: record_apply
-- Record that :revision was applied under :token (re-applying rewrites its row).
INSERT INTO {schema}_applied_revision
       (version_table, revision, resource, applied_token, holder, method, script_sha256, source)
VALUES (:version_table, :revision, :resource, :token, :holder, 'upgrade', :script_sha256, :source)
ON CONFLICT (version_table, revision) DO UPDATE
   SET resource = excluded.resource, applied_token = excluded.applied_token,
       holder = excluded.holder, method = excluded.method,
       applied_at = strftime('%Y-%m-%dT%H:%M:%fZ', 'now'), script_sha256 = excluded.script_sha256,
       source = excluded.source

-- name: record_redis_grant
-- A Redis grant's record of the :token it has just issued for :resource (the table's only writer),
-- in the grant's transaction before its fence advance (the grant_fence statement): the lease guard refuses
-- a fence whose tokens come from Redis above the recorded token. Inserts the row, or raises its
-- token; never lowers it (the row as inserted is never below the recorded token, which the
-- monotonic guard's BEFORE INSERT trigger checks before the conflict is seen).
INSERT INTO {schema}_redis_grant (resource, token)
VALUES (:resource, max(:token, coalesce((SELECT g.token FROM {schema}_redis_grant g WHERE g.resource = :resource), 0)))
ON CONFLICT (resource) DO UPDATE
   SET token = excluded.token, granted_at = strftime('%Y-%m-%dT%H:%M:%fZ', 'now')
 WHERE excluded.token > {schema}_redis_grant.token

-- name: record_stamp
-- Record that :revision was stamped under :token; a stamp never overwrites the record of a
-- revision that really ran.
INSERT INTO {schema}_applied_revision
       (version_table, revision, resource, applied_token, holder, method, script_sha256, source)
VALUES (:version_table, :revision, :resource, :token, :holder, 'stamp', :script_sha256, :source)
ON CONFLICT (version_table, revision) DO NOTHING

-- name: schema_version
-- The installed fence schema version.
SELECT version FROM {schema}_schema_version WHERE one_row = 1

-- name: script_applied_file
-- A --sql script's downgrade of :revision: stop unless the database applied the file whose
-- downgrade() the script holds (sha256 :script_sha256), or recorded no sha256 of it
-- (the script_objects statement). Written only into scripts: run online, the runner compares.
INSERT INTO temp.fencemigrate_script_applied_file (version_table, revision, script_sha256)
VALUES (:version_table, :revision, :script_sha256)

-- name: script_claim
-- A --sql script's claim of :resource with :token (a literal, or the token the script was granted,
-- read in its session): the trigger fencemigrate_script_claim (the script_objects statement) refuses or
-- claims; :marks_version_write (1) before the ledger and version rows.
INSERT INTO temp.fencemigrate_script_claim (resource, token, marks_version_write)
VALUES (:resource, :token, :marks_version_write)

-- name: script_grant
-- A --sql script's own grant, when it runs (the script_grant_objects statement): the fence schema must be
-- there (:fence_table, the table that holds its version), at :schema_version or later; then the
-- grant of :resource to :holder for :ttl_ms, refused unless the version table holds exactly
-- :heads (sorted, comma-separated; '' for none). Three statements: each check needs the tables
-- the one before it proved are there.
INSERT INTO temp.fencemigrate_script_schema_check (fence_table, schema_version) VALUES (:fence_table, :schema_version);
INSERT INTO temp.fencemigrate_script_version_check (schema_version) VALUES (:schema_version);
INSERT INTO temp.fencemigrate_script_grant (resource, holder, ttl_ms, heads) VALUES (:resource, :holder, :ttl_ms, :heads)

-- name: script_grant_objects
-- The grant a --sql script written without --token takes when it runs, as TEMP tables and triggers
-- of its own sqlite3 session (nothing is added to the database): the grant `fencemigrate upgrade`
-- takes itself (fencemigrate/leases/database.py), in SQL. The script's transaction began with
-- BEGIN IMMEDIATE, which waited (the shell's .timeout, --wait) for SQLite's only write lock: no
-- migration or grant is in flight, and none can start before the script commits or stops.
--   1. the fence schema must be installed (fencemigrate_script_schema_check), at the version this
--      fencemigrate installs or later (fencemigrate_script_version_check);
--   2. SQLite's clock must not read more than 366 days after the newest event (the clock_lead statement); a
--      resource whose tokens come from Redis is refused; a live lease of another holder is busy at
--      once: SQL cannot sleep, and waiting inside this transaction would keep its holder from the
--      write lock its renewals and release need;
--   3. the version table's rows must be exactly the heads the script was written from ({heads}),
--      else FENCED;
--   4. another holder's lapsed lease is logged EXPIRE (released first when it was implausible: granted
--      further in the future than its TTL), the next token issued above the lease counter and the fence
--      (SQLite grants never move epochs), the lease granted for the TTL, the fence advanced to the
--      token, GRANT logged, and the token kept in fencemigrate_script_lease for the script's claims
--      and ledger rows (the script_token statement).
-- {version_table} is the version table, {heads} and {resource} are written into the messages.
CREATE TEMP TABLE IF NOT EXISTS fencemigrate_script_schema_check (fence_table TEXT NOT NULL, schema_version TEXT NOT NULL);
CREATE TEMP TABLE IF NOT EXISTS fencemigrate_script_version_check (schema_version TEXT NOT NULL);
CREATE TEMP TABLE IF NOT EXISTS fencemigrate_script_grant (
    resource TEXT NOT NULL, holder TEXT NOT NULL, ttl_ms INTEGER NOT NULL, heads TEXT NOT NULL
);
DROP TRIGGER IF EXISTS temp.fencemigrate_script_schema_check;
CREATE TEMP TRIGGER fencemigrate_script_schema_check BEFORE INSERT ON fencemigrate_script_schema_check
BEGIN
    SELECT RAISE(ABORT, 'fencemigrate: the fence schema is not installed in this database: install it (fencemigrate install, or fencemigrate install --sql | sqlite3 -bail DB) and run the script again; nothing was applied')
     WHERE NOT EXISTS (SELECT 1 FROM sqlite_master m WHERE m.type = 'table' AND m.name = NEW.fence_table);
END;
DROP TRIGGER IF EXISTS temp.fencemigrate_script_version_check;
CREATE TEMP TRIGGER fencemigrate_script_version_check BEFORE INSERT ON fencemigrate_script_version_check
BEGIN
    SELECT RAISE(ABORT, 'fencemigrate: the fence schema here is older than this script needs ({schema_version}): update it (fencemigrate install) and run the script again; nothing was applied')
     WHERE (SELECT CAST(substr(v.version, 1, instr(v.version, '.') - 1) AS INTEGER) * 1000000
                   + CAST(substr(v.version, instr(v.version, '.') + 1) AS INTEGER)
              FROM {schema}_schema_version v)
         < CAST(substr(NEW.schema_version, 1, instr(NEW.schema_version, '.') - 1) AS INTEGER) * 1000000
           + CAST(substr(NEW.schema_version, instr(NEW.schema_version, '.') + 1) AS INTEGER);
END;
DROP TRIGGER IF EXISTS temp.fencemigrate_script_grant;
CREATE TEMP TRIGGER fencemigrate_script_grant BEFORE INSERT ON fencemigrate_script_grant
BEGIN
    SELECT RAISE(ABORT, 'grant refused: SQLite''s clock (this machine''s) is more than 366 days ahead of the newest event in the fence event log: a lease granted by it would look live to every other client until then. Fix this machine''s clock; nothing was applied')
     WHERE (SELECT julianday('now') - julianday(max(e.at)) FROM {schema}_fence_event e) > 366;
    SELECT RAISE(ABORT, 'fencemigrate: the tokens of {resource} come from Redis: a script takes its lease from the database''s lease service only; write it with --token N from a Redis grant; nothing was applied')
     WHERE EXISTS (SELECT 1 FROM {schema}_agent_fence f WHERE f.resource = NEW.resource AND f.token_source = 'redis');
    INSERT INTO {schema}_lease (resource, token)
    SELECT NEW.resource, 0
     WHERE NOT EXISTS (SELECT 1 FROM {schema}_lease l WHERE l.resource = NEW.resource);
    SELECT RAISE(ABORT, 'lease on {resource} is busy: another holder''s lease is live (fencemigrate lease status shows it); this is transient, try again later (a script on SQLite does not wait for a live lease); nothing was applied')
     WHERE EXISTS (SELECT 1 FROM {schema}_lease l
                    WHERE l.resource = NEW.resource AND l.holder IS NOT NULL AND l.holder <> NEW.holder
                      AND l.expires_at > strftime('%Y-%m-%dT%H:%M:%fZ', 'now')
                      AND NOT coalesce(l.granted_at > strftime('%Y-%m-%dT%H:%M:%fZ', 'now', '+' || (l.ttl_ms / 1000.0) || ' seconds'), 0));
    SELECT RAISE(ABORT, 'FENCED: the heads are not {heads}, the ones this script was written from (resource {resource}). This is NOT a transient error: do not retry, rebase, renumber or re-apply; re-read the state (fencemigrate state) and re-plan. Nothing was applied')
     WHERE coalesce((SELECT group_concat(v.version_num, ',')
                       FROM (SELECT version_num FROM {version_table} ORDER BY version_num) v), '') <> NEW.heads;
    INSERT INTO {schema}_fence_event (at, resource, kind, holder, token, detail)
    SELECT CASE WHEN x.implausible THEN strftime('%Y-%m-%dT%H:%M:%fZ', 'now') ELSE x.expires_at END,
           x.resource, 'EXPIRE', x.holder, x.token,
           CASE WHEN x.implausible
                THEN json_object('expires_at', x.expires_at, 'granted_at', x.granted_at, 'implausible', json('true')) END
      FROM (SELECT l.*, coalesce(l.granted_at > strftime('%Y-%m-%dT%H:%M:%fZ', 'now', '+' || (l.ttl_ms / 1000.0) || ' seconds'), 0) AS implausible
              FROM {schema}_lease l
             WHERE l.resource = NEW.resource AND l.holder IS NOT NULL AND l.holder <> NEW.holder) x;
    UPDATE {schema}_lease
       SET holder = NULL, ttl_ms = NULL, granted_at = NULL, expires_at = NULL
     WHERE resource = NEW.resource AND holder IS NOT NULL
       AND coalesce(granted_at > strftime('%Y-%m-%dT%H:%M:%fZ', 'now', '+' || (ttl_ms / 1000.0) || ' seconds'), 0);
    UPDATE {schema}_lease
       SET holder = NEW.holder,
           token = max(token, coalesce((SELECT f.token FROM {schema}_agent_fence f WHERE f.resource = NEW.resource), 0)) + 1,
           ttl_ms = NEW.ttl_ms,
           granted_at = strftime('%Y-%m-%dT%H:%M:%fZ', 'now'),
           expires_at = strftime('%Y-%m-%dT%H:%M:%fZ', 'now', '+' || (NEW.ttl_ms / 1000.0) || ' seconds')
     WHERE resource = NEW.resource;
    UPDATE {schema}_agent_fence
       SET token = (SELECT l.token FROM {schema}_lease l WHERE l.resource = NEW.resource),
           token_source = 'lease service', updated_at = strftime('%Y-%m-%dT%H:%M:%fZ', 'now')
     WHERE resource = NEW.resource;
    INSERT INTO {schema}_agent_fence (resource, token, token_source)
    SELECT l.resource, l.token, 'lease service' FROM {schema}_lease l
     WHERE l.resource = NEW.resource
       AND NOT EXISTS (SELECT 1 FROM {schema}_agent_fence f WHERE f.resource = NEW.resource);
    INSERT INTO {schema}_fence_event (resource, kind, holder, token, detail)
    SELECT l.resource, 'GRANT', NEW.holder, l.token, '{"ttl_ms": ' || NEW.ttl_ms || '}'
      FROM {schema}_lease l WHERE l.resource = NEW.resource;
    DELETE FROM fencemigrate_script_lease;
    INSERT INTO fencemigrate_script_lease (resource, holder, token)
    SELECT l.resource, NEW.holder, l.token FROM {schema}_lease l WHERE l.resource = NEW.resource;
END;

-- name: script_objects
-- The objects a --sql script creates in its own sqlite3 session (TEMP: nothing is added to the
-- database, and they end with the session). SQLite has no procedural SQL outside triggers, and
-- RAISE() only works inside one: each check is a TEMP trigger on a TEMP table, fired by a plain
-- INSERT the script writes where the check belongs (the script_claim statement, the script_applied_file statement).
-- A refusal is RAISE(ABORT): that statement fails and the script's `.bail on` stops the sqlite3
-- shell there, which rolls back the transaction it leaves open. {resource} is the resource,
-- written into the messages (RAISE takes a fixed text before SQLite 3.47). Dropped and created
-- again: a session that ran another script before keeps nothing of it, nor any token
-- (fencemigrate_script_lease starts empty).
CREATE TEMP TABLE IF NOT EXISTS fencemigrate_script_lease (
    resource TEXT NOT NULL, holder TEXT NOT NULL, token INTEGER NOT NULL
);
DELETE FROM temp.fencemigrate_script_lease;
CREATE TEMP TABLE IF NOT EXISTS fencemigrate_script_claim (
    resource TEXT NOT NULL, token INTEGER, marks_version_write INTEGER NOT NULL
);
CREATE TEMP TABLE IF NOT EXISTS fencemigrate_script_applied_file (
    version_table TEXT NOT NULL, revision TEXT NOT NULL, script_sha256 TEXT NOT NULL
);
-- The claim (the claim statement, the seed_fence statement and the fence_source statement's refusal, in one trigger): FENCED when
-- the session holds no token (NULL: its grant was refused, or never ran), when a higher token has
-- written, or when the resource's lease service never issued this token; then, before a version
-- write, the mark that lets that write through the version table's guard (the mark_version_write statement;
-- the script clears it right after the write, the clear_version_write statement).
DROP TRIGGER IF EXISTS temp.fencemigrate_script_claim;
CREATE TEMP TRIGGER fencemigrate_script_claim BEFORE INSERT ON fencemigrate_script_claim
BEGIN
    SELECT RAISE(ABORT, 'FENCED: this session holds no fencing token of {resource} (the script''s grant was refused or did not run): nothing after it may run. This is NOT a transient error: re-read the state (fencemigrate state) and re-plan. The transaction this script left open rolls back')
     WHERE NEW.token IS NULL;
    SELECT RAISE(ABORT, 'FENCED: a newer token has written to {resource} since this script''s token was issued (or its lease service never issued it). This is NOT a transient error: do not retry, rebase, renumber or re-apply; re-read the state (fencemigrate state) and re-plan. The transaction this script left open rolls back')
     WHERE EXISTS (SELECT 1 FROM {schema}_agent_fence f
                    WHERE f.resource = NEW.resource
                      AND (f.token > NEW.token OR (f.token_source <> 'external' AND f.token <> NEW.token)));
    UPDATE {schema}_agent_fence
       SET token = NEW.token,
           updated_at = iif(token < NEW.token, strftime('%Y-%m-%dT%H:%M:%fZ', 'now'), updated_at)
     WHERE resource = NEW.resource AND token <= NEW.token;
    INSERT INTO {schema}_agent_fence (resource, token)
    SELECT NEW.resource, NEW.token
     WHERE NOT EXISTS (SELECT 1 FROM {schema}_agent_fence f WHERE f.resource = NEW.resource);
    INSERT OR IGNORE INTO {schema}_version_write_claim (one_row) SELECT 1 WHERE NEW.marks_version_write;
END;
-- A downgrade's check that the database applied the file whose downgrade() the script holds (or
-- recorded no sha256 of it), as the require_applied_file statement on PostgreSQL.
DROP TRIGGER IF EXISTS temp.fencemigrate_script_applied_file;
CREATE TEMP TRIGGER fencemigrate_script_applied_file BEFORE INSERT ON fencemigrate_script_applied_file
BEGIN
    SELECT RAISE(ABORT, 'fencemigrate: a revision this script rolls back was applied from another text than the file it rolls it back with: nothing was rolled back. Roll it back with fencemigrate itself, which runs the downgrade() of the text as applied, or write the script again from that text (fencemigrate show REV --applied > FILE)')
     WHERE EXISTS (SELECT 1 FROM {schema}_applied_revision a
                    WHERE a.version_table = NEW.version_table AND a.revision = NEW.revision
                      AND a.script_sha256 <> NEW.script_sha256);
END;

-- name: script_release
-- A --sql script's release of its own lease (the script_grant_objects statement), after its last version
-- write, in that transaction: as the lease_release statement frees a lease, logged RELEASE as the lease
-- service logs it. Nothing when the lease is no longer the script's.
INSERT INTO {schema}_fence_event (resource, kind, holder, token)
SELECT l.resource, 'RELEASE', l.holder, l.token
  FROM {schema}_lease l
  JOIN temp.fencemigrate_script_lease s ON s.resource = l.resource AND s.holder = l.holder AND s.token = l.token;
UPDATE {schema}_lease
   SET holder = NULL, ttl_ms = NULL, granted_at = NULL, expires_at = NULL
 WHERE EXISTS (SELECT 1 FROM temp.fencemigrate_script_lease s
                WHERE s.resource = {schema}_lease.resource AND s.holder = {schema}_lease.holder
                  AND s.token = {schema}_lease.token)

-- name: script_token
-- The token a --sql script was granted when it ran (the script_grant_objects statement), read in its own
-- session where its claims and ledger rows take a token: an expression, not a statement. No row
-- (nothing was granted in this session): NULL, which the claim refuses and the ledger's NOT NULL too.
(SELECT s.token FROM temp.fencemigrate_script_lease s)

-- name: seed_fence
-- The first claim on a resource: its fence row, with :token. 0 rows when the row exists.
INSERT INTO {schema}_agent_fence (resource, token)
SELECT :resource, :token
 WHERE NOT EXISTS (SELECT 1 FROM {schema}_agent_fence WHERE resource = :resource)

-- name: seed_granted_fence
-- The first grant of a resource never claimed: its fence row, at the :token its lease service
-- (:source) issued. 0 rows when the row exists.
INSERT INTO {schema}_agent_fence (resource, token, token_source)
SELECT :resource, :token, :source
 WHERE NOT EXISTS (SELECT 1 FROM {schema}_agent_fence WHERE resource = :resource)

-- name: timeline_events
-- The event log for `fencemigrate timeline`, oldest first: every resource, or only :resource;
-- from :since_at (ISO-8601 text) on, or from :since_ms milliseconds ago by SQLite's clock
-- (NULL: no limit). Times are compared as UTC text of one form, however they were written.
SELECT id, at, resource, kind, holder, token, revision, detail
  FROM {schema}_fence_event
 WHERE (:resource IS NULL OR resource = :resource)
   AND (:since_at IS NULL
        OR strftime('%Y-%m-%dT%H:%M:%fZ', at) >= strftime('%Y-%m-%dT%H:%M:%fZ', :since_at))
   AND (:since_ms IS NULL
        OR strftime('%Y-%m-%dT%H:%M:%fZ', at)
           >= strftime('%Y-%m-%dT%H:%M:%fZ', 'now', '-' || (:since_ms / 1000.0) || ' seconds'))
 ORDER BY strftime('%Y-%m-%dT%H:%M:%fZ', at), id

-- name: unguard_version_table
-- Remove the guard triggers of Alembic's version table (the guard_version_table statement names them).
DROP TRIGGER IF EXISTS {insert_guard};
DROP TRIGGER IF EXISTS {update_guard};
DROP TRIGGER IF EXISTS {delete_guard};

-- name: version_guard_state
-- How writes without a token are treated on the version table :table_name (ledger name
-- :version_table): allowed (opted out, since when), guarded (its insert trigger :insert_trigger is
-- on it), whether the version table exists, and the other table that holds a trigger named as one
-- of its guards (:insert_trigger, :update_trigger, :delete_trigger), if any: a version table
-- renamed keeps its triggers, and their names then cannot guard the new one.
SELECT (SELECT a.allowed_at FROM {schema}_tokenless_writes_allowed a
         WHERE a.version_table = :version_table) AS allowed_at,
       EXISTS (SELECT 1 FROM sqlite_master
                WHERE type = 'trigger' AND name = :insert_trigger AND tbl_name = :table_name) AS guarded,
       EXISTS (SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = :table_name) AS table_exists,
       (SELECT MIN(tbl_name) FROM sqlite_master
         WHERE type = 'trigger' AND tbl_name <> :table_name
           AND name IN (:insert_trigger, :update_trigger, :delete_trigger)) AS names_taken_by
