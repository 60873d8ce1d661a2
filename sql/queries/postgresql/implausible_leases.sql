-- Held leases granted further in the future than their TTL by the database's clock (stepped back
-- since): implausible, counted as expired (lease_peek.sql).
SELECT resource, holder, token, granted_at, ttl_ms
  FROM {schema}.lease
 WHERE holder IS NOT NULL
   AND granted_at > clock_timestamp() + ttl_ms * interval '1 millisecond'
 ORDER BY resource
