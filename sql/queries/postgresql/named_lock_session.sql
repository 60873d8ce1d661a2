-- Who holds pre-check mode's named lock on :resource: its backend pid, what it runs (state, seconds in
-- it, statement), and the pre-check run it is: the holder, token and start of the revision it marked
-- in flight (none before its first revision's mark), else the fence token (its claim, committed
-- under the lock). No row when the lock is free.
SELECT s.pid, s.state AS command, floor(extract(epoch FROM now() - s.state_change))::int AS seconds,
       s.query AS info, m.state_holder AS holder, COALESCE(m.state_token, f.token) AS token,
       m.state_since AS since
  FROM pg_stat_activity s
  LEFT JOIN LATERAL (SELECT a.state_holder, a.state_token, a.state_since
                       FROM {schema}.applied_revision a
                      WHERE a.resource = :resource AND a.state <> 'applied'
                      ORDER BY a.state_since DESC LIMIT 1) m ON TRUE
  LEFT JOIN {schema}.agent_fence f ON f.resource = :resource
 WHERE s.pid IN (SELECT l.pid FROM pg_locks l
                  WHERE l.locktype = 'advisory'
                    AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
                    AND l.classid = {named_lock_class} AND l.objid = {schema}.lock_key(:resource)::oid
                    AND l.objsubid = 2 AND l.granted)
