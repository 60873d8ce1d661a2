-- Serialise first runs (and installs) adopting a version table's history until this transaction
-- ends: the install lock, so that only one of them finds the ledger empty.
SELECT pg_advisory_xact_lock(hashtext({install_lock_key}))
