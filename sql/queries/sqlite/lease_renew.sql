-- Extend :holder's lease of :resource (the grant with :token, or its current one when NULL) by
-- :ttl_ms from now (when NULL, by the TTL it was granted or last renewed with), by SQLite's
-- clock. A lease stays its holder's until someone else is granted it: renewing after expiry is
-- allowed. lease_held.sql reads the grant first.
UPDATE {schema}_lease
   SET ttl_ms = coalesce(:ttl_ms, ttl_ms),
       expires_at = strftime('%Y-%m-%dT%H:%M:%fZ', 'now',
                             '+' || (coalesce(:ttl_ms, ttl_ms) / 1000.0) || ' seconds')
 WHERE resource = :resource
   AND holder = :holder
   AND token = coalesce(:token, token)
