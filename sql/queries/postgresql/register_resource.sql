-- Give :resource its advisory lock key unless it has one (see resource_lock_key in the fence schema),
-- in a transaction of its own before a run's first claim: a key registered by the claim itself is
-- not seen by a grant of another resource until the migration commits.
SELECT {schema}.resource_key(:resource)
