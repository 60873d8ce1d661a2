-- Serialise first runs (and installs) adopting a version table's history until this transaction
-- ends: a write takes the database's write lock now, so that only one of them finds the ledger
-- empty (the row is left as it is).
UPDATE {schema}_schema_version SET version = version WHERE one_row = 1
