-- Grant the lease of :resource to :holder under the new :token, for :ttl_ms by SQLite's clock.
UPDATE {schema}_lease
   SET holder = :holder, token = :token, ttl_ms = :ttl_ms,
       granted_at = strftime('%Y-%m-%dT%H:%M:%fZ', 'now'),
       expires_at = strftime('%Y-%m-%dT%H:%M:%fZ', 'now', '+' || (:ttl_ms / 1000.0) || ' seconds')
 WHERE resource = :resource
