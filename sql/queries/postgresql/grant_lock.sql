-- Serialise grants of :resource by an external lease service (Redis) until this transaction ends.
-- The fence row lock does this once the resource has been claimed; before its first claim there is
-- no row to lock. Waits at most the transaction's lock_timeout.
-- Keyed by the resource's lock key as the committed rows have it (lock_key(): not given here, so a
-- first claim in flight never makes this wait before a --preempt can end it).
SELECT pg_advisory_xact_lock({grant_lock_class}, {schema}.lock_key(:resource))
