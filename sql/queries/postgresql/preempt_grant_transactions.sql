-- --preempt by a Redis grant (which holds the Redis lease key: nobody else's lease is live):
-- terminate the sessions stuck inside another grant's transaction on :resource, holding
-- grant_lock.sql's advisory lock in this database, whose client has sent nothing for :idle_ms
-- (its process paused or stopped). A bigint advisory key shows in pg_locks as classid (high 32
-- bits) and objid (low 32 bits), objsubid 1. pg_terminate_backend waits up to :wait_ms for each.
SELECT a.pid, pg_terminate_backend(a.pid, :wait_ms) AS terminated
  FROM (SELECT hashtext({grant_lock_key_prefix} || :resource)::bigint AS key) k
  JOIN pg_locks l
    ON l.locktype = 'advisory' AND l.objsubid = 1 AND l.mode = 'ExclusiveLock' AND l.granted
   AND l.classid = ((k.key >> 32) & 4294967295)::oid AND l.objid = (k.key & 4294967295)::oid
   AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
  JOIN pg_stat_activity a ON a.pid = l.pid
 WHERE a.state IN ('idle in transaction', 'idle in transaction (aborted)')
   AND a.state_change <= clock_timestamp() - :idle_ms * interval '1 millisecond'
   AND a.pid <> pg_backend_pid()
