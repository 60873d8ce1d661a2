-- fencemigrate 1.0 on SQLite: the fence schema, complete.
--
-- SQLite has no schemas, so every object is named with the fence schema's name as a prefix:
-- @extschema@_agent_fence becomes "fencemigrate_agent_fence" by default (fencemigrate_schema
-- in alembic.ini changes the prefix). The runner applies this file, one statement at a time,
-- inside the first fenced run's own transaction; every statement is idempotent. Later versions
-- come with upgrade scripts (fencemigrate--1.0--1.1.sql, ...). 1.0 squashes the pre-release
-- versions 0.2 to 0.8, whose history still shapes the stored text of some statements: columns
-- added by ALTER TABLE ... ADD COLUMN stand where it put them, the ledger and the event log are
-- named as ALTER TABLE ... RENAME TO wrote them, and each table's triggers come in the order they
-- were created.
--
-- Same tables, columns and checks as the PostgreSQL schema (its full script in sql/), where
-- SQLite has them; pre-check mode is not for SQLite. Times are ISO-8601 UTC text
-- with milliseconds, from SQLite's own clock: strftime('%Y-%m-%dT%H:%M:%fZ', 'now'). The claim,
-- the ledger writes and their events are plain statements in sql/queries/sqlite/ (SQLite has no
-- stored functions); the guards are triggers. (DROP TABLE cannot be guarded on SQLite; the
-- guards protect against mistakes and stale writers, not against someone who owns the file.)


-- == The fence ==

-- One row per fenced resource: the highest token that has ever written to it.
-- token_source: where the resource's tokens come from: 'external' (a harness's own leases pass
-- --token; the first claim seeds its row so), 'lease service' (built in) or 'redis'. A grant
-- advances the fence to the token it issued and sets the source (the grant_fence statement), so on a leased
-- resource the fence token is the last token issued, and the claim statement refuses any higher token
-- (FENCED: never issued).
CREATE TABLE IF NOT EXISTS @extschema@_agent_fence (
    resource   TEXT    NOT NULL PRIMARY KEY
               CHECK (resource <> '' AND length(resource) <= 255),
    token      INTEGER NOT NULL CHECK (token > 0),
    updated_at TEXT    NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
, token_source TEXT NOT NULL DEFAULT 'external'
        CHECK (token_source IN ('external', 'lease service', 'redis')));

-- The monotonic guard: no client, fencemigrate or not, can lower a fence token, rename a
-- fenced resource or delete a fence row. INSERT OR REPLACE deletes the row it replaces
-- without firing delete triggers, so an insert may not land below an existing token either.
CREATE TRIGGER IF NOT EXISTS @extschema@_agent_fence_no_rename
BEFORE UPDATE ON @extschema@_agent_fence
FOR EACH ROW WHEN NEW.resource IS NOT OLD.resource
BEGIN
    SELECT RAISE(ABORT, 'agent_fence is monotonic: a fenced resource cannot be renamed');
END;

CREATE TRIGGER IF NOT EXISTS @extschema@_agent_fence_no_lowering
BEFORE UPDATE ON @extschema@_agent_fence
FOR EACH ROW WHEN NEW.token < OLD.token
BEGIN
    SELECT RAISE(ABORT, 'agent_fence is monotonic: a fence token cannot go down');
END;

CREATE TRIGGER IF NOT EXISTS @extschema@_agent_fence_no_replace_lower
BEFORE INSERT ON @extschema@_agent_fence
FOR EACH ROW WHEN EXISTS (SELECT 1 FROM @extschema@_agent_fence f
                          WHERE f.resource = NEW.resource AND f.token > NEW.token)
BEGIN
    SELECT RAISE(ABORT, 'agent_fence is monotonic: a fence token cannot go down');
END;

CREATE TRIGGER IF NOT EXISTS @extschema@_agent_fence_no_delete
BEFORE DELETE ON @extschema@_agent_fence
FOR EACH ROW
BEGIN
    SELECT RAISE(ABORT, 'agent_fence is monotonic: deleting fence rows is not allowed');
END;

-- Tokens are integers from 1 to 2^62 (4611686018427387904; lease counters from 0): INTEGER
-- affinity keeps 'abc' and 2.5 as they are, after which every command would fail to read them,
-- and a grant issues one above the fence, which must not overflow. Checked on every write by
-- triggers, so that a row already out of range (as restored from an old dump) stays readable.
CREATE TRIGGER IF NOT EXISTS @extschema@_agent_fence_token_domain_insert
BEFORE INSERT ON @extschema@_agent_fence
FOR EACH ROW WHEN typeof(NEW.token) <> 'integer' OR NEW.token < 1 OR NEW.token > 4611686018427387904
BEGIN
    SELECT RAISE(ABORT, 'fence tokens are integers from 1 to 4611686018427387904');
END;
CREATE TRIGGER IF NOT EXISTS @extschema@_agent_fence_token_domain_update
BEFORE UPDATE OF token ON @extschema@_agent_fence
FOR EACH ROW WHEN typeof(NEW.token) <> 'integer' OR NEW.token < 1 OR NEW.token > 4611686018427387904
BEGIN
    SELECT RAISE(ABORT, 'fence tokens are integers from 1 to 4611686018427387904');
END;


-- == The ledger and the event log ==

-- One row per revision applied (or stamped) by a fenced run, per Alembic version table.
-- Re-applying a revision is legal only under the token that applied it.
-- source: the text of the revision file, as the run that wrote the row read it (the same bytes
-- its script_sha256 was computed from, decoded as UTF-8), for `fencemigrate show REV --applied`
-- and check --db's drift diff. NULL ("source not recorded") for a revision adopted with no
-- readable file, or a file that is not UTF-8 text. Stored as it is: SQLite has no compression of its own (a
-- revision file is a few kB; the PostgreSQL and MySQL schemas compress).
CREATE TABLE IF NOT EXISTS @extschema@_applied_revision (
    version_table TEXT    NOT NULL,
    revision      TEXT    NOT NULL,
    resource      TEXT    NOT NULL,
    applied_token INTEGER NOT NULL,
    holder        TEXT    NOT NULL,
    method        TEXT    NOT NULL CHECK (method IN ('upgrade', 'stamp', 'adopt')),
    applied_at    TEXT    NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    script_sha256 TEXT,
    source        TEXT,
    PRIMARY KEY (version_table, revision),
    CHECK (CASE WHEN method = 'adopt' THEN applied_token = 0 ELSE applied_token > 0 END)
);

CREATE TRIGGER IF NOT EXISTS @extschema@_applied_revision_token_domain_insert
BEFORE INSERT ON @extschema@_applied_revision
FOR EACH ROW WHEN typeof(NEW.applied_token) <> 'integer' OR NEW.applied_token < CASE WHEN NEW.method = 'adopt' THEN 0 ELSE 1 END
                  OR NEW.applied_token > 4611686018427387904
BEGIN
    SELECT RAISE(ABORT, 'ledger tokens are integers from 1 to 4611686018427387904');
END;
CREATE TRIGGER IF NOT EXISTS @extschema@_applied_revision_token_domain_update
BEFORE UPDATE OF applied_token ON @extschema@_applied_revision
FOR EACH ROW WHEN typeof(NEW.applied_token) <> 'integer' OR NEW.applied_token < CASE WHEN NEW.method = 'adopt' THEN 0 ELSE 1 END
                  OR NEW.applied_token > 4611686018427387904
BEGIN
    SELECT RAISE(ABORT, 'ledger tokens are integers from 1 to 4611686018427387904');
END;

-- The story of every resource, for `fencemigrate timeline`: lease grants, renewals, releases,
-- expiries seen, preemptions, applied and rolled-back revisions, FENCED rejections.
-- AUTOINCREMENT: an id is never reused, as with PostgreSQL's identity column.
CREATE TABLE IF NOT EXISTS @extschema@_fence_event (
    id       INTEGER PRIMARY KEY AUTOINCREMENT,
    at       TEXT    NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    resource TEXT    NOT NULL,
    kind     TEXT    NOT NULL CHECK (kind IN ('GRANT', 'RENEW', 'RELEASE', 'EXPIRE', 'PREEMPT',
                                              'LOST', 'APPLY', 'STAMP', 'ROLLBACK', 'UNSTAMP',
                                              'FENCED', 'ADOPT')),
    holder   TEXT,
    token    INTEGER,
    revision TEXT,
    detail   TEXT
);
CREATE INDEX IF NOT EXISTS @extschema@_fence_event_resource_at
    ON @extschema@_fence_event (resource, at);


-- == Leases and their guards ==

-- One row per resource ever leased. token is the highest token the lease service has issued
-- for the resource: the durable counter, which only goes up. holder and expires_at are NULL
-- when the lease is released.
CREATE TABLE IF NOT EXISTS @extschema@_lease (
    resource   TEXT    NOT NULL PRIMARY KEY
               CHECK (resource <> '' AND length(resource) <= 255),
    token      INTEGER NOT NULL CHECK (token >= 0),
    holder     TEXT    CHECK (holder <> '' AND length(holder) <= 255),
    ttl_ms     INTEGER CHECK (ttl_ms > 0),
    granted_at TEXT,
    expires_at TEXT,
    CHECK ((holder IS NULL) = (expires_at IS NULL))
);

-- The same monotonic guard on the lease token counter: it never goes down, and lease rows stay.
CREATE TRIGGER IF NOT EXISTS @extschema@_lease_monotonic
BEFORE UPDATE ON @extschema@_lease
FOR EACH ROW WHEN NEW.resource IS NOT OLD.resource OR NEW.token < OLD.token
BEGIN
    SELECT RAISE(ABORT, 'the lease token counter is monotonic: lowering or renaming a lease is not allowed');
END;

CREATE TRIGGER IF NOT EXISTS @extschema@_lease_no_replace_lower
BEFORE INSERT ON @extschema@_lease
FOR EACH ROW WHEN EXISTS (SELECT 1 FROM @extschema@_lease l
                          WHERE l.resource = NEW.resource AND l.token > NEW.token)
BEGIN
    SELECT RAISE(ABORT, 'the lease token counter is monotonic: lowering or renaming a lease is not allowed');
END;

CREATE TRIGGER IF NOT EXISTS @extschema@_lease_no_delete
BEFORE DELETE ON @extschema@_lease
FOR EACH ROW
BEGIN
    SELECT RAISE(ABORT, 'the lease token counter is monotonic: deleting a lease is not allowed');
END;

-- The token domain of lease counters (see agent_fence's).
CREATE TRIGGER IF NOT EXISTS @extschema@_lease_token_domain_insert
BEFORE INSERT ON @extschema@_lease
FOR EACH ROW WHEN typeof(NEW.token) <> 'integer' OR NEW.token < 0 OR NEW.token > 4611686018427387904
BEGIN
    SELECT RAISE(ABORT, 'lease tokens are integers from 0 to 4611686018427387904');
END;
CREATE TRIGGER IF NOT EXISTS @extschema@_lease_token_domain_update
BEFORE UPDATE OF token ON @extschema@_lease
FOR EACH ROW WHEN typeof(NEW.token) <> 'integer' OR NEW.token < 0 OR NEW.token > 4611686018427387904
BEGIN
    SELECT RAISE(ABORT, 'lease tokens are integers from 0 to 4611686018427387904');
END;

-- The lease guard: the same rules as PostgreSQL's lease_grant_guard() and agent_fence_source_guard()
-- (its full script in sql/), one trigger each (SQLite's RAISE takes a fixed message, every
-- one starting 'lease guard: '). A lease is live while it has a holder and expires_at is after
-- strftime('%Y-%m-%dT%H:%M:%fZ', 'now'): SQLite's clock, the clock of whichever machine writes the
-- file, the same one the lease service judges leases by (see README, SQLite). A token that is not
-- an integer from 1 to 2^62 is the token domain triggers' to refuse, a lower one the monotonic
-- guard's: these triggers leave both alone.

-- lease: a token is never handed to another holder; a new token goes to another holder only when
-- the old lease is no longer live; a grant's token is above the fence token.
CREATE TRIGGER IF NOT EXISTS @extschema@_lease_token_keeps_its_holder
BEFORE UPDATE ON @extschema@_lease
FOR EACH ROW WHEN NEW.token = OLD.token AND NEW.holder IS NOT NULL AND NEW.holder IS NOT OLD.holder
BEGIN
    SELECT RAISE(ABORT, 'lease guard: this token was issued to another holder or released: a new holder needs a new token, which only a grant issues');
END;

CREATE TRIGGER IF NOT EXISTS @extschema@_lease_no_stolen_grant
BEFORE UPDATE ON @extschema@_lease
FOR EACH ROW WHEN NEW.token > OLD.token AND OLD.holder IS NOT NULL AND NEW.holder IS NOT OLD.holder
                  AND OLD.expires_at > strftime('%Y-%m-%dT%H:%M:%fZ', 'now')
BEGIN
    SELECT RAISE(ABORT, 'lease guard: the lease is held by another holder until it expires: only a grant gives it to another holder, once it is released or has expired');
END;

CREATE TRIGGER IF NOT EXISTS @extschema@_lease_grant_above_fence
BEFORE UPDATE ON @extschema@_lease
FOR EACH ROW WHEN typeof(NEW.token) = 'integer' AND NEW.token <= 4611686018427387904 AND NEW.token > OLD.token AND NEW.holder IS NOT NULL
                  AND NEW.token <= (SELECT f.token FROM @extschema@_agent_fence f WHERE f.resource = NEW.resource)
BEGIN
    SELECT RAISE(ABORT, 'lease guard: a grant issues a token above the fence token');
END;

-- INSERT OR REPLACE deletes the row it replaces without firing delete triggers: a lease row is
-- changed by UPDATE (the lease_seed statement inserts only a missing row; a lower token is the monotonic
-- guard's to refuse).
CREATE TRIGGER IF NOT EXISTS @extschema@_lease_no_replace
BEFORE INSERT ON @extschema@_lease
FOR EACH ROW WHEN typeof(NEW.token) = 'integer' AND NEW.token <= 4611686018427387904
                  AND EXISTS (SELECT 1 FROM @extschema@_lease l
                              WHERE l.resource = NEW.resource AND l.token <= NEW.token)
BEGIN
    SELECT RAISE(ABORT, 'lease guard: a lease row is never replaced: a grant, renew or release updates it');
END;

CREATE TRIGGER IF NOT EXISTS @extschema@_lease_insert_above_fence
BEFORE INSERT ON @extschema@_lease
FOR EACH ROW WHEN typeof(NEW.token) = 'integer' AND NEW.token <= 4611686018427387904 AND NEW.holder IS NOT NULL
                  AND NEW.token <= (SELECT f.token FROM @extschema@_agent_fence f WHERE f.resource = NEW.resource)
BEGIN
    SELECT RAISE(ABORT, 'lease guard: a grant issues a token above the fence token');
END;

-- agent_fence: while a resource takes its tokens from the built-in lease service, its fence token
-- is at most the last token that service issued, and it leaves the service only while no lease
-- on it is live. 'redis': see Redis grants below.
CREATE TRIGGER IF NOT EXISTS @extschema@_agent_fence_no_unissued_token
BEFORE UPDATE ON @extschema@_agent_fence
FOR EACH ROW WHEN typeof(NEW.token) = 'integer' AND NEW.token <= 4611686018427387904 AND NEW.token_source = 'lease service'
                  AND NEW.token >= OLD.token AND (NEW.token > OLD.token OR OLD.token_source <> 'lease service')
                  AND NEW.token > coalesce((SELECT l.token FROM @extschema@_lease l WHERE l.resource = NEW.resource), 0)
BEGIN
    SELECT RAISE(ABORT, 'lease guard: this fence token is above the last token the lease service issued: it was never issued');
END;

CREATE TRIGGER IF NOT EXISTS @extschema@_agent_fence_insert_unissued_token
BEFORE INSERT ON @extschema@_agent_fence
FOR EACH ROW WHEN typeof(NEW.token) = 'integer' AND NEW.token <= 4611686018427387904 AND NEW.token_source = 'lease service'
                  AND NEW.token > coalesce((SELECT l.token FROM @extschema@_lease l WHERE l.resource = NEW.resource), 0)
BEGIN
    SELECT RAISE(ABORT, 'lease guard: this fence token is above the last token the lease service issued: it was never issued');
END;

CREATE TRIGGER IF NOT EXISTS @extschema@_agent_fence_no_live_detach
BEFORE UPDATE ON @extschema@_agent_fence
FOR EACH ROW WHEN OLD.token_source = 'lease service' AND NEW.token_source <> 'lease service'
                  AND EXISTS (SELECT 1 FROM @extschema@_lease l
                               WHERE l.resource = OLD.resource AND l.holder IS NOT NULL
                                 AND l.expires_at > strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
BEGIN
    SELECT RAISE(ABORT, 'lease guard: the lease of this resource is live: its fence cannot leave the lease service while that lease is live');
END;

-- A fence row of the lease service's is never replaced either (INSERT OR REPLACE would take it
-- back to 'external' behind a live lease); the claim's seed_fence statement inserts only a missing row.
CREATE TRIGGER IF NOT EXISTS @extschema@_agent_fence_no_replace_leased
BEFORE INSERT ON @extschema@_agent_fence
FOR EACH ROW WHEN typeof(NEW.token) = 'integer' AND NEW.token <= 4611686018427387904
                  AND EXISTS (SELECT 1 FROM @extschema@_agent_fence f
                          WHERE f.resource = NEW.resource AND f.token <= NEW.token
                            AND f.token_source = 'lease service')
BEGIN
    SELECT RAISE(ABORT, 'lease guard: a fence row of the lease service is never replaced: a grant or lease detach updates it');
END;


-- == Redis grants and their guard ==
-- The database cannot ask Redis for its counter, so every Redis grant records the token it issued
-- here, in its own transaction before it advances the fence (the record_redis_grant statement), and the
-- lease guard holds a fence whose tokens come from Redis to that record, as it holds a fence of
-- the built-in lease service to the lease's counter.

-- One row per resource ever granted by the Redis lease backend. token is the last token Redis
-- issued for it; granted_at, when the grant recorded it. No holder: the grant's GRANT event in
-- fence_event names it.
CREATE TABLE IF NOT EXISTS @extschema@_redis_grant (
    resource   TEXT    NOT NULL PRIMARY KEY
               CHECK (resource <> '' AND length(resource) <= 255),
    token      INTEGER NOT NULL CHECK (token > 0),
    granted_at TEXT    NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
);

-- The monotonic guard of the record, as of the lease token counter: the token never goes down
-- (INSERT OR REPLACE deletes the row it replaces without firing delete triggers, so an insert may
-- not land below it either), and rows are never renamed or deleted.
CREATE TRIGGER IF NOT EXISTS @extschema@_redis_grant_monotonic
BEFORE UPDATE ON @extschema@_redis_grant
FOR EACH ROW WHEN NEW.resource IS NOT OLD.resource OR NEW.token < OLD.token
BEGIN
    SELECT RAISE(ABORT, 'redis_grant is monotonic: lowering or renaming a recorded grant is not allowed');
END;

CREATE TRIGGER IF NOT EXISTS @extschema@_redis_grant_no_replace_lower
BEFORE INSERT ON @extschema@_redis_grant
FOR EACH ROW WHEN EXISTS (SELECT 1 FROM @extschema@_redis_grant g
                          WHERE g.resource = NEW.resource AND g.token > NEW.token)
BEGIN
    SELECT RAISE(ABORT, 'redis_grant is monotonic: lowering or renaming a recorded grant is not allowed');
END;

CREATE TRIGGER IF NOT EXISTS @extschema@_redis_grant_no_delete
BEFORE DELETE ON @extschema@_redis_grant
FOR EACH ROW
BEGIN
    SELECT RAISE(ABORT, 'redis_grant is monotonic: deleting a recorded grant is not allowed');
END;

-- The token domain of recorded grants (see agent_fence's).
CREATE TRIGGER IF NOT EXISTS @extschema@_redis_grant_token_domain_insert
BEFORE INSERT ON @extschema@_redis_grant
FOR EACH ROW WHEN typeof(NEW.token) <> 'integer' OR NEW.token < 1 OR NEW.token > 4611686018427387904
BEGIN
    SELECT RAISE(ABORT, 'Redis grant tokens are integers from 1 to 4611686018427387904');
END;
CREATE TRIGGER IF NOT EXISTS @extschema@_redis_grant_token_domain_update
BEFORE UPDATE OF token ON @extschema@_redis_grant
FOR EACH ROW WHEN typeof(NEW.token) <> 'integer' OR NEW.token < 1 OR NEW.token > 4611686018427387904
BEGIN
    SELECT RAISE(ABORT, 'Redis grant tokens are integers from 1 to 4611686018427387904');
END;

-- agent_fence: while a resource takes its tokens from Redis, its fence token is at most the last
-- token Redis issued for it, as its grants recorded it (none recorded: 0), and a fence moves to
-- 'redis' only at or below that token (a grant records its token first). A fence may leave Redis:
-- the database cannot see whether a Redis lease is live (`lease detach --lease-url` asks Redis).
-- Forging the record first, then the fence, is not refused: the same limit as forging the lease
-- row for the built-in service; check --db reports the fence no GRANT event explains (FM413).
CREATE TRIGGER IF NOT EXISTS @extschema@_agent_fence_no_unissued_redis_token
BEFORE UPDATE ON @extschema@_agent_fence
FOR EACH ROW WHEN typeof(NEW.token) = 'integer' AND NEW.token <= 4611686018427387904 AND NEW.token_source = 'redis'
                  AND NEW.token >= OLD.token AND (NEW.token > OLD.token OR OLD.token_source <> 'redis')
                  AND NEW.token > coalesce((SELECT g.token FROM @extschema@_redis_grant g WHERE g.resource = NEW.resource), 0)
BEGIN
    SELECT RAISE(ABORT, 'lease guard: this fence token is above the last token Redis issued (recorded by its grant): it was never issued');
END;

CREATE TRIGGER IF NOT EXISTS @extschema@_agent_fence_insert_unissued_redis_token
BEFORE INSERT ON @extschema@_agent_fence
FOR EACH ROW WHEN typeof(NEW.token) = 'integer' AND NEW.token <= 4611686018427387904 AND NEW.token_source = 'redis'
                  AND NEW.token > coalesce((SELECT g.token FROM @extschema@_redis_grant g WHERE g.resource = NEW.resource), 0)
BEGIN
    SELECT RAISE(ABORT, 'lease guard: this fence token is above the last token Redis issued (recorded by its grant): it was never issued');
END;


-- == Writes without a token ==

-- Once a database is fenced, Alembic's version table refuses writes that no fenced run made
-- (triggers created per version table from guard_version_table in sql/queries/sqlite.sql). SQLite has
-- one writer at a time and a persistent trigger cannot read TEMP tables: a fenced run writes the
-- row of version_write_claim just before Alembic writes its version row and deletes it right
-- after, in the same transaction, so no other connection ever sees it committed.
CREATE TABLE IF NOT EXISTS @extschema@_version_write_claim (
    one_row INTEGER NOT NULL PRIMARY KEY CHECK (one_row = 1)
);

-- Version tables whose guard was removed on purpose (fencemigrate install --allow-tokenless-writes).
CREATE TABLE IF NOT EXISTS @extschema@_tokenless_writes_allowed (
    version_table TEXT NOT NULL PRIMARY KEY,
    allowed_at    TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
);


-- == The version ==

-- The version of this schema, read by the runner to decide what to install (one row).
CREATE TABLE IF NOT EXISTS @extschema@_schema_version (
    one_row INTEGER NOT NULL PRIMARY KEY CHECK (one_row = 1),
    version TEXT    NOT NULL
);
INSERT INTO @extschema@_schema_version (one_row, version) VALUES (1, '1.0')
    ON CONFLICT (one_row) DO NOTHING;
