-- Serialise concurrent installs of the fence schema until this transaction ends.
SELECT pg_advisory_xact_lock(hashtext({install_lock_key}))
