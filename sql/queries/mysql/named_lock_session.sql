-- Who holds the named lock :name on :resource: its connection id, what it runs (command, seconds in
-- it, statement), and the pre-check run it is: the holder, token and start of the revision it marked
-- in flight (none before its first revision's mark), else the fence token (its claim, committed
-- under the lock). No row when the lock is free.
SELECT p.ID AS pid, p.COMMAND AS command, p.TIME AS seconds, p.INFO AS info,
       m.state_holder AS holder, COALESCE(m.state_token, f.token) AS token, m.state_since AS since
  FROM information_schema.PROCESSLIST p
  LEFT JOIN (SELECT a.state_holder, a.state_token, a.state_since
               FROM {schema}_applied_revision a
              WHERE a.resource = :resource AND a.state <> 'applied'
              ORDER BY a.state_since DESC LIMIT 1) m ON TRUE
  LEFT JOIN {schema}_agent_fence f ON f.resource = :resource
 WHERE p.ID = IS_USED_LOCK(:name)
