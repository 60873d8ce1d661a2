-- fencemigrate 0.2 on SQLite: the fence schema as it first shipped (a fresh install now runs the
-- current version's full script, fencemigrate--0.5.sql; this file and the update scripts after
-- it are how a database installed at 0.2 got to the current version).
--
-- SQLite has no schemas, so every object is named with the fence schema's name as a prefix:
-- @extschema@_agent_fence becomes "fencemigrate_agent_fence" by default (fencemigrate_schema
-- in alembic.ini changes the prefix). The runner applies this file, one statement at a time,
-- inside the first fenced run's own transaction; every statement is idempotent.
-- Same tables, columns and checks as the PostgreSQL schema 0.2 (sql/fencemigrate--0.1.sql and
-- sql/fencemigrate--0.1--0.2.sql). Times are ISO-8601 UTC text with milliseconds, from SQLite's
-- own clock: strftime('%Y-%m-%dT%H:%M:%fZ', 'now'). The claim, the ledger writes and their
-- events are plain statements in sql/queries/sqlite/ (SQLite has no stored functions).

-- One row per fenced resource: the highest token that has ever written to it.
CREATE TABLE IF NOT EXISTS @extschema@_agent_fence (
    resource   TEXT    NOT NULL PRIMARY KEY
               CHECK (resource <> '' AND length(resource) <= 255),
    token      INTEGER NOT NULL CHECK (token > 0),
    updated_at TEXT    NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
);

-- One row per revision applied (or stamped) by a fenced run, per Alembic version table.
-- Re-applying a revision is legal only under the token that applied it.
CREATE TABLE IF NOT EXISTS @extschema@_applied_revision (
    version_table TEXT    NOT NULL,
    revision      TEXT    NOT NULL,
    resource      TEXT    NOT NULL,
    applied_token INTEGER NOT NULL CHECK (applied_token > 0),
    holder        TEXT    NOT NULL,
    method        TEXT    NOT NULL CHECK (method IN ('upgrade', 'stamp')),
    applied_at    TEXT    NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    script_sha256 TEXT,
    PRIMARY KEY (version_table, revision)
);

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

-- The story of every resource, for `fencemigrate timeline`: lease grants, renewals, releases,
-- expiries seen, preemptions, applied and rolled-back revisions, FENCED rejections.
-- AUTOINCREMENT: an id is never reused, as with PostgreSQL's identity column.
CREATE TABLE IF NOT EXISTS @extschema@_fence_event (
    id       INTEGER PRIMARY KEY AUTOINCREMENT,
    at       TEXT    NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    resource TEXT    NOT NULL,
    kind     TEXT    NOT NULL CHECK (kind IN ('GRANT', 'RENEW', 'RELEASE', 'EXPIRE', 'PREEMPT',
                                              'LOST', 'APPLY', 'STAMP', 'ROLLBACK', 'FENCED')),
    holder   TEXT,
    token    INTEGER,
    revision TEXT,
    detail   TEXT
);
CREATE INDEX IF NOT EXISTS @extschema@_fence_event_resource_at
    ON @extschema@_fence_event (resource, at);

-- The monotonic guard: no client, fencemigrate or not, can lower a fence token, rename a
-- fenced resource or delete a fence row. INSERT OR REPLACE deletes the row it replaces
-- without firing delete triggers, so an insert may not land below an existing token either.
-- (DROP TABLE cannot be guarded on SQLite; the guard protects against mistakes and stale
-- writers, not against someone who owns the file.)
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

-- The same guard on the lease token counter: it never goes down, and lease rows stay.
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

-- The version of this schema, read by the runner to decide what to install (one row).
CREATE TABLE IF NOT EXISTS @extschema@_schema_version (
    one_row INTEGER NOT NULL PRIMARY KEY CHECK (one_row = 1),
    version TEXT    NOT NULL
);
INSERT INTO @extschema@_schema_version (one_row, version) VALUES (1, '0.2')
    ON CONFLICT (one_row) DO NOTHING;
