-- A fenced run is about to write Alembic's version table in this transaction (see
-- guard_version_table.sql); cleared by clear_version_write.sql right after the write.
INSERT OR IGNORE INTO {schema}_version_write_claim (one_row) VALUES (1)
