-- Free :holder's lease of :resource (the grant with :token, or its current one when NULL).
UPDATE {schema}.lease
   SET holder = NULL, ttl_ms = NULL, granted_at = NULL, expires_at = NULL
 WHERE resource = :resource
   AND holder = :holder
   AND token = coalesce(CAST(:token AS bigint), token)
RETURNING token
