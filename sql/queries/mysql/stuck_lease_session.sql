-- --preempt: the connection id of the session inside a lease transaction on :resource (holding
-- the lease lock :lock_name) whose client has sent nothing for :idle_s seconds (its process paused or
-- stopped), only while the lease as committed has no live holder (free, or expired by the
-- server's UTC clock); no row otherwise. A live holder's stuck renewal is never named.
SELECT p.ID AS connection_id
  FROM information_schema.PROCESSLIST p
 WHERE p.ID = IS_USED_LOCK(:lock_name)
   AND p.ID <> CONNECTION_ID()
   AND p.COMMAND = 'Sleep'
   AND p.TIME >= :idle_s
   AND NOT EXISTS (SELECT 1 FROM {schema}_lease l
                    WHERE l.resource = :resource AND l.holder IS NOT NULL AND l.expires_at > UTC_TIMESTAMP(6))
