-- Who holds the fence of :resource now: the sessions whose transaction holds its claim lock (every
-- claim holds it shared until its transaction ends, a grant exclusively), oldest transaction first,
-- with their application_name (claimant.sql names a claim's transaction), when their transaction
-- began, its state and its last statement. pg_locks is server-wide: only this database's locks count.
SELECT a.pid, a.application_name, a.xact_start, a.state, a.query
  FROM pg_locks l
  JOIN pg_stat_activity a ON a.pid = l.pid
 WHERE l.locktype = 'advisory'
   AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
   AND l.classid = {claim_lock_class}
   AND l.objid = {schema}.lock_key(:resource)::oid
   AND l.objsubid = 2
   AND l.granted
   AND l.pid <> pg_backend_pid()
 ORDER BY a.xact_start, a.pid
