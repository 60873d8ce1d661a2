-- Serialise grants of :resource by an external lease service (Redis) until this transaction ends.
-- The fence row lock does this once the resource has been claimed; before its first claim there is
-- no row to lock. Waits at most the transaction's lock_timeout.
SELECT pg_advisory_xact_lock(hashtext({grant_lock_key_prefix} || :resource))
