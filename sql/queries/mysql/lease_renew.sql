-- Extend :holder's lease of :resource (the grant with :token, or its current one when NULL) by
-- :ttl_ms from now (when NULL, by the TTL it was granted or last renewed with), by the server's
-- clock. A lease stays its holder's until someone else is granted it: renewing after expiry is
-- allowed. lease_held.sql locks and reads the grant first.
UPDATE {schema}_lease
   SET expires_at = UTC_TIMESTAMP(6) + INTERVAL (COALESCE(:ttl_ms, ttl_ms) * 1000) MICROSECOND,
       ttl_ms = COALESCE(:ttl_ms, ttl_ms)
 WHERE resource = :resource
   AND holder = :holder
   AND token = COALESCE(:token, token)
