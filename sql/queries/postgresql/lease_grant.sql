-- Grant the (locked) lease of :resource to :holder under the new :token, for :ttl_ms by the
-- database's clock, saying how the grant is replicated (:replication, see synchronous_grant.sql).
UPDATE {schema}.lease
   SET holder = :holder, token = :token, ttl_ms = :ttl_ms, replication = :replication,
       granted_at = clock_timestamp(),
       expires_at = clock_timestamp() + :ttl_ms * interval '1 millisecond'
 WHERE resource = :resource
RETURNING granted_at, expires_at
