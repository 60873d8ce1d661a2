-- Grant the (locked) lease of :resource to :holder under the new :token, for :ttl_ms by the database's clock.
UPDATE {schema}.lease
   SET holder = :holder, token = :token, ttl_ms = :ttl_ms,
       granted_at = clock_timestamp(),
       expires_at = clock_timestamp() + :ttl_ms * interval '1 millisecond'
 WHERE resource = :resource
RETURNING granted_at, expires_at
