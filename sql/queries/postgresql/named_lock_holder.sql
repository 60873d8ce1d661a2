-- The backend pid of the session holding pre-check mode's named lock on :resource (no row: free).
-- pg_locks is server-wide: only this database's advisory locks are this resource's.
SELECT pid FROM pg_locks
 WHERE locktype = 'advisory' AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
   AND classid = {named_lock_class} AND objid = {schema}.lock_key(:resource)::oid
   AND objsubid = 2 AND granted
