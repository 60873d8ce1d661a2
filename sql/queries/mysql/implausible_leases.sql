-- Held leases granted further in the future than their TTL by the server's UTC clock (stepped back
-- since): implausible, counted as expired (lease_peek.sql).
SELECT resource, holder, token, granted_at, ttl_ms
  FROM {schema}_lease
 WHERE holder IS NOT NULL
   AND granted_at > UTC_TIMESTAMP(6) + INTERVAL ttl_ms * 1000 MICROSECOND
 ORDER BY resource
