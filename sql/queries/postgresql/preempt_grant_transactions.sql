-- --preempt by a Redis grant (which holds the Redis lease key: nobody else's lease is live):
-- terminate the sessions stuck inside another grant's transaction on :resource, holding
-- grant_lock.sql's advisory lock in this database, whose client has sent nothing for :idle_ms
-- (its process paused or stopped). pg_terminate_backend waits up to :wait_ms for each.
SELECT a.pid, pg_terminate_backend(a.pid, :wait_ms) AS terminated
  FROM pg_locks l
  JOIN pg_stat_activity a ON a.pid = l.pid
 WHERE l.locktype = 'advisory' AND l.objsubid = 2 AND l.mode = 'ExclusiveLock' AND l.granted
   AND l.classid = {grant_lock_class} AND l.objid = {schema}.lock_key(:resource)::oid
   AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
   AND a.state IN ('idle in transaction', 'idle in transaction (aborted)')
   AND a.state_change <= clock_timestamp() - :idle_ms * interval '1 millisecond'
   AND a.pid <> pg_backend_pid()
