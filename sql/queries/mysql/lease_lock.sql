-- The lease row of :resource for a grant, locked until the grant commits; a lease granted further
-- in the future than its TTL is implausible (lease_peek.sql) and counts as expired.
SELECT holder, token, granted_at, expires_at,
       expires_at <= UTC_TIMESTAMP(6)
           OR COALESCE(granted_at > UTC_TIMESTAMP(6) + INTERVAL ttl_ms * 1000 MICROSECOND, 0) AS expired,
       COALESCE(granted_at > UTC_TIMESTAMP(6) + INTERVAL ttl_ms * 1000 MICROSECOND, 0) AS implausible
  FROM {schema}_lease
 WHERE resource = :resource
   FOR UPDATE
