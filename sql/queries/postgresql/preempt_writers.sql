-- Terminate the sessions whose transaction holds a claim on :resource (claim() takes this shared
-- advisory lock until its transaction ends): a stale writer's in-flight migration rolls back.
-- pg_terminate_backend waits up to :wait_ms for each to exit. pg_locks is server-wide and advisory
-- locks are per database: only this database's sessions on this resource are ever looked at. The
-- resource's lock key is its own (lock_key(): a first claim in flight took the key it will have).
SELECT l.pid, pg_terminate_backend(l.pid, :wait_ms) AS terminated
  FROM pg_locks l
 WHERE l.locktype = 'advisory'
   AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
   AND l.classid = {claim_lock_class}
   AND l.objid = {schema}.lock_key(:resource)::oid
   AND l.objsubid = 2
   AND l.granted
   AND l.pid <> pg_backend_pid()
