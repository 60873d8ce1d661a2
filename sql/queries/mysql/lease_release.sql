-- Free :holder's lease of :resource (the grant with :token, or its current one when NULL); the
-- token counter stays. lease_held.sql locks and reads the grant first.
UPDATE {schema}_lease
   SET holder = NULL, ttl_ms = NULL, granted_at = NULL, expires_at = NULL
 WHERE resource = :resource
   AND holder = :holder
   AND token = COALESCE(:token, token)
