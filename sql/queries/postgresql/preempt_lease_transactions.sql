-- --preempt: terminate the sessions stuck inside a lease transaction on :resource: a grant, renew
-- or release that changed or locked the lease row and whose client has sent nothing for :idle_ms
-- (its process paused or stopped). The lease row's xmax names the transaction holding it; only
-- while the lease as committed has no live holder (free, or expired by this database's clock),
-- and only sessions of this database. pg_terminate_backend waits up to :wait_ms for each to exit.
SELECT a.pid, pg_terminate_backend(a.pid, :wait_ms) AS terminated
  FROM {schema}.lease s
  JOIN pg_locks l
    ON l.locktype = 'transactionid' AND l.transactionid = s.xmax AND l.mode = 'ExclusiveLock' AND l.granted
  JOIN pg_stat_activity a ON a.pid = l.pid
 WHERE s.resource = :resource
   AND (s.holder IS NULL OR s.expires_at <= clock_timestamp())
   AND a.datname = current_database()
   AND a.state IN ('idle in transaction', 'idle in transaction (aborted)')
   AND a.state_change <= clock_timestamp() - :idle_ms * interval '1 millisecond'
   AND a.pid <> pg_backend_pid()
