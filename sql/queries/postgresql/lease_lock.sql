-- Lock the lease row of :resource for a grant (after the fence row) and read it again; a lease
-- granted further in the future than its TTL is implausible (lease_peek.sql) and counts as expired.
SELECT holder, token, granted_at, expires_at,
       expires_at <= clock_timestamp()
           OR coalesce(granted_at > clock_timestamp() + ttl_ms * interval '1 millisecond', false) AS expired,
       coalesce(granted_at > clock_timestamp() + ttl_ms * interval '1 millisecond', false) AS implausible
  FROM {schema}.lease
 WHERE resource = :resource
   FOR UPDATE
