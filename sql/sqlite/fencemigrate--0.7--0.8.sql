-- fencemigrate 0.7 -> 0.8 on SQLite: the ledger adopts the revisions a database had applied
-- before it was fenced (issue 25, item 3): method 'adopt', applied_token 0, and one ADOPT event for
-- all of them.
--
-- The runner applies this file, one statement at a time, inside a fenced run's own transaction:
-- on a database at 0.7 (a fresh install runs the current version's full script instead).
-- SQLite cannot change a table's CHECK constraints: the ledger and the event log are rebuilt (new
-- table, rows copied, old table dropped, new one renamed; its triggers and index created again),
-- as SQLite's documentation describes (https://www.sqlite.org/lang_altertable.html#otheralter).
-- The event log keeps its ids, so the AUTOINCREMENT counter goes on from the highest one.

CREATE TABLE @extschema@_applied_revision_0_8 (
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
INSERT INTO @extschema@_applied_revision_0_8 (version_table, revision, resource, applied_token, holder, method, applied_at, script_sha256, source)
SELECT version_table, revision, resource, applied_token, holder, method, applied_at, script_sha256, source FROM @extschema@_applied_revision;
DROP TABLE @extschema@_applied_revision;
ALTER TABLE @extschema@_applied_revision_0_8 RENAME TO @extschema@_applied_revision;

CREATE TRIGGER @extschema@_applied_revision_token_domain_insert
BEFORE INSERT ON @extschema@_applied_revision
FOR EACH ROW WHEN typeof(NEW.applied_token) <> 'integer' OR NEW.applied_token < CASE WHEN NEW.method = 'adopt' THEN 0 ELSE 1 END
                  OR NEW.applied_token > 4611686018427387904
BEGIN
    SELECT RAISE(ABORT, 'ledger tokens are integers from 1 to 4611686018427387904');
END;
CREATE TRIGGER @extschema@_applied_revision_token_domain_update
BEFORE UPDATE OF applied_token ON @extschema@_applied_revision
FOR EACH ROW WHEN typeof(NEW.applied_token) <> 'integer' OR NEW.applied_token < CASE WHEN NEW.method = 'adopt' THEN 0 ELSE 1 END
                  OR NEW.applied_token > 4611686018427387904
BEGIN
    SELECT RAISE(ABORT, 'ledger tokens are integers from 1 to 4611686018427387904');
END;

CREATE TABLE @extschema@_fence_event_0_8 (
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
INSERT INTO @extschema@_fence_event_0_8 (id, at, resource, kind, holder, token, revision, detail)
SELECT id, at, resource, kind, holder, token, revision, detail FROM @extschema@_fence_event;
DROP TABLE @extschema@_fence_event;
ALTER TABLE @extschema@_fence_event_0_8 RENAME TO @extschema@_fence_event;
CREATE INDEX @extschema@_fence_event_resource_at
    ON @extschema@_fence_event (resource, at);

UPDATE @extschema@_schema_version SET version = '0.8' WHERE one_row = 1;
