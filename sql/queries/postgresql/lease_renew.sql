-- Extend :holder's lease of :resource (the grant with :token, or its current one when NULL) by :ttl_ms,
-- or by the TTL it was granted (or last renewed) with when :ttl_ms is NULL.
-- A lease stays its holder's until someone else is granted it: renewing after expiry is allowed.
WITH old AS (
    SELECT resource, expires_at <= clock_timestamp() AS expired
      FROM {schema}.lease
     WHERE resource = :resource
       FOR UPDATE
)
UPDATE {schema}.lease l
   SET ttl_ms = coalesce(CAST(:ttl_ms AS bigint), l.ttl_ms),
       expires_at = clock_timestamp() + coalesce(CAST(:ttl_ms AS bigint), l.ttl_ms) * interval '1 millisecond'
  FROM old
 WHERE l.resource = old.resource
   AND l.holder = :holder
   AND l.token = coalesce(CAST(:token AS bigint), l.token)
RETURNING l.token, l.granted_at, l.expires_at, old.expired AS was_expired
