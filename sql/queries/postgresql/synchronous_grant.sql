-- A grant commits durably whatever its session says, for its own transaction only (any role may
-- set these, e.g. in PGOPTIONS or ALTER ROLE ... SET):
-- * synchronous_commit 'off' would let a crash lose a grant already reported (the restarted server,
--   on the same incarnation, would issue its token again): raised to 'on';
-- * with synchronous standbys, 'local' or 'remote_write' would let a promoted standby that never
--   received the grant issue its token again: raised to 'on' (the standby has flushed it); 'on'
--   and 'remote_apply' are kept;
-- * client_min_messages 'error' would hide the WARNING that says the COMMIT stopped waiting for a
--   standby before one confirmed it: lowered to 'warning'.
-- Returns whether the grant's COMMIT waits for a standby.
SELECT current_setting('synchronous_standby_names') <> '' AS waits_for_standby,
       CASE WHEN current_setting('synchronous_commit') = 'off'
              OR (current_setting('synchronous_standby_names') <> ''
                  AND current_setting('synchronous_commit') IN ('local', 'remote_write'))
            THEN set_config('synchronous_commit', 'on', true)
       END AS synchronous_commit,
       CASE WHEN current_setting('client_min_messages') = 'error'
            THEN set_config('client_min_messages', 'warning', true)
       END AS client_min_messages
