-- The objects a --sql script creates in its own sqlite3 session (TEMP: nothing is added to the
-- database, and they end with the session). SQLite has no procedural SQL outside triggers, and
-- RAISE() only works inside one: each check is a TEMP trigger on a TEMP table, fired by a plain
-- INSERT the script writes where the check belongs (script_claim.sql, script_applied_file.sql).
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
-- The claim (claim.sql, seed_fence.sql and fence_source.sql's refusal, in one trigger): FENCED when
-- the session holds no token (NULL: its grant was refused, or never ran), when a higher token has
-- written, or when the resource's lease service never issued this token; then, before a version
-- write, the mark that lets that write through the version table's guard (mark_version_write.sql;
-- the script clears it right after the write, clear_version_write.sql).
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
-- recorded no sha256 of it), as require_applied_file.sql on PostgreSQL.
DROP TRIGGER IF EXISTS temp.fencemigrate_script_applied_file;
CREATE TEMP TRIGGER fencemigrate_script_applied_file BEFORE INSERT ON fencemigrate_script_applied_file
BEGIN
    SELECT RAISE(ABORT, 'fencemigrate: a revision this script rolls back was applied from another text than the file it rolls it back with: nothing was rolled back. Roll it back with fencemigrate itself, which runs the downgrade() of the text as applied, or write the script again from that text (fencemigrate show REV --applied > FILE)')
     WHERE EXISTS (SELECT 1 FROM {schema}_applied_revision a
                    WHERE a.version_table = NEW.version_table AND a.revision = NEW.revision
                      AND a.script_sha256 <> NEW.script_sha256);
END;
