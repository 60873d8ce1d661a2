-- fencemigrate 0.2 -> 0.4 on SQLite: a hardened fence (issue 12). Version 0.3 (pre-check mode)
-- is not for SQLite, so this update goes straight to 0.4, the version the other databases have.
--
-- The runner applies this file, one statement at a time, inside a fenced run's own transaction:
-- on a database at 0.2 (a fresh install runs the current version's full script instead).

-- == token sources and the token domain (issue 12, defect 3) ==
-- Where a resource's tokens come from: 'external' (a harness's own leases pass --token; the first
-- claim seeds its row so), 'lease service' (built in) or 'redis'. A grant advances the fence to
-- the token it issued and sets the source (grant_fence.sql), so on a leased resource the fence
-- token is the last token issued, and claim.sql refuses any higher token (FENCED: never issued).
-- Rows of databases updated from 0.2: the source of their last grant, if any.
ALTER TABLE @extschema@_agent_fence
    ADD COLUMN token_source TEXT NOT NULL DEFAULT 'external'
        CHECK (token_source IN ('external', 'lease service', 'redis'));
UPDATE @extschema@_agent_fence
   SET token_source = (SELECT CASE WHEN e.detail LIKE '%"lease_service": "redis"%' THEN 'redis'
                                   ELSE 'lease service' END
                         FROM @extschema@_fence_event e
                        WHERE e.resource = @extschema@_agent_fence.resource AND e.kind = 'GRANT'
                        ORDER BY e.at DESC, e.id DESC LIMIT 1)
 WHERE EXISTS (SELECT 1 FROM @extschema@_fence_event e
                WHERE e.resource = @extschema@_agent_fence.resource AND e.kind = 'GRANT');

-- Tokens are integers from 1 to 2^62 (4611686018427387904; lease counters from 0): INTEGER
-- affinity keeps 'abc' and 2.5 as they are, after which every command would fail to read them,
-- and a grant issues one above the fence, which must not overflow. Checked on every write (rows
-- already there stay readable; SQLite cannot add a CHECK to an existing table).
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
CREATE TRIGGER IF NOT EXISTS @extschema@_applied_revision_token_domain_insert
BEFORE INSERT ON @extschema@_applied_revision
FOR EACH ROW WHEN typeof(NEW.applied_token) <> 'integer' OR NEW.applied_token < 1
                  OR NEW.applied_token > 4611686018427387904
BEGIN
    SELECT RAISE(ABORT, 'ledger tokens are integers from 1 to 4611686018427387904');
END;
CREATE TRIGGER IF NOT EXISTS @extschema@_applied_revision_token_domain_update
BEFORE UPDATE OF applied_token ON @extschema@_applied_revision
FOR EACH ROW WHEN typeof(NEW.applied_token) <> 'integer' OR NEW.applied_token < 1
                  OR NEW.applied_token > 4611686018427387904
BEGIN
    SELECT RAISE(ABORT, 'ledger tokens are integers from 1 to 4611686018427387904');
END;
-- == end of token sources (issue 12, defect 3) ==

-- == Writes without a token (issue 12, defect 5) ==
-- Once a database is fenced, Alembic's version table refuses writes that no fenced run made
-- (triggers created per version table from sql/queries/sqlite/guard_version_table.sql). SQLite has
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

UPDATE @extschema@_schema_version SET version = '0.4' WHERE one_row = 1;
