-- The grant a --sql script written without --token takes when it runs, as TEMP tables and triggers
-- of its own sqlite3 session (nothing is added to the database): the grant `fencemigrate upgrade`
-- takes itself (fencemigrate/leases/database.py), in SQL. The script's transaction began with
-- BEGIN IMMEDIATE, which waited (the shell's .timeout, --wait) for SQLite's only write lock: no
-- migration or grant is in flight, and none can start before the script commits or stops.
--   1. the fence schema must be installed (fencemigrate_script_schema_check), at the version this
--      fencemigrate installs or later (fencemigrate_script_version_check);
--   2. SQLite's clock must not read more than 366 days after the newest event (clock_lead.sql); a
--      resource whose tokens come from Redis is refused; a live lease of another holder is busy at
--      once: SQL cannot sleep, and waiting inside this transaction would keep its holder from the
--      write lock its renewals and release need;
--   3. the version table's rows must be exactly the heads the script was written from ({heads}),
--      else FENCED;
--   4. another holder's lapsed lease is logged EXPIRE (released first when it was implausible: granted
--      further in the future than its TTL), the next token issued above the lease counter and the fence
--      (SQLite grants never move epochs), the lease granted for the TTL, the fence advanced to the
--      token, GRANT logged, and the token kept in fencemigrate_script_lease for the script's claims
--      and ledger rows (script_token.sql).
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
