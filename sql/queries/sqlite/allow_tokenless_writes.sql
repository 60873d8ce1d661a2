-- Opt out: record that :version_table takes writes without a token (its triggers are dropped too).
INSERT OR IGNORE INTO {schema}_tokenless_writes_allowed (version_table) VALUES (:version_table)
