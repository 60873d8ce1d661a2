-- The backend pid of the session holding pre-check mode's named lock on :resource (no row: free).
SELECT pid FROM pg_locks
 WHERE locktype = 'advisory' AND classid = 1718503790 AND objid = hashtext(:resource)::oid
   AND objsubid = 2 AND granted
