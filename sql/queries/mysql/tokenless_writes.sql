-- Dirty revisions left by refused writes without a token (guard_version_table.sql), oldest first:
-- the latest refused write of each revision.
SELECT w.version_table, w.revision, w.state, w.at
  FROM {schema}_tokenless_write w
 WHERE w.id = (SELECT MAX(v.id) FROM {schema}_tokenless_write v
                WHERE v.version_table = w.version_table AND v.revision = w.revision)
 ORDER BY w.at, w.revision
