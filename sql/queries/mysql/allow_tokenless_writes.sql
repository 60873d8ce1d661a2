-- Opt out: record that :version_table takes writes without a token (its triggers are dropped too).
INSERT IGNORE INTO {schema}_tokenless_writes_allowed (version_table, allowed_at)
VALUES (:version_table, UTC_TIMESTAMP(6))
