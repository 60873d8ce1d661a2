-- Wait (at most lock_timeout) until no transaction holds a claim on :resource, and keep new claims
-- out until this transaction ends: claim() takes the same advisory lock in shared mode.
-- The resource's lock key is given now if it has none: a first claim of :resource still in flight
-- (its key not committed) makes this wait too.
SELECT pg_advisory_xact_lock({claim_lock_class}, {schema}.resource_key(:resource))
