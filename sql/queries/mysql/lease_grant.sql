-- Grant the lease of :resource to :holder under the new :token, for :ttl_ms by the server's clock.
UPDATE {schema}_lease
   SET holder = :holder, token = :token, ttl_ms = :ttl_ms,
       granted_at = UTC_TIMESTAMP(6),
       expires_at = UTC_TIMESTAMP(6) + INTERVAL (:ttl_ms * 1000) MICROSECOND
 WHERE resource = :resource
