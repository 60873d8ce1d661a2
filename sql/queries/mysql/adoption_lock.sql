-- Serialise first runs (and installs) adopting a version table's history until this transaction
-- ends: the fence schema's version row, locked for update, so that only one of them finds the
-- ledger empty.
SELECT version FROM {schema}_schema_version WHERE one_row = 1 FOR UPDATE
