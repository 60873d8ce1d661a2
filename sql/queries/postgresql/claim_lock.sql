-- Wait (at most lock_timeout) until no transaction holds a claim on :resource, and keep new claims
-- out until this transaction ends: claim() takes the same advisory lock in shared mode.
SELECT pg_advisory_xact_lock({claim_lock_class}, hashtext(:resource))
