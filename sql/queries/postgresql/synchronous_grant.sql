-- A grant on a primary with synchronous standbys commits synchronously whatever its session says:
-- synchronous_commit 'off', 'local' or 'remote_write' (any role may set them) would let a promoted
-- standby that never received the grant issue its token again. Raised to 'on' (the standby has
-- flushed it) for the grant's transaction only; 'on' and 'remote_apply' are kept. Returns whether
-- the grant's COMMIT waits for a standby.
SELECT current_setting('synchronous_standby_names') <> '' AS waits_for_standby,
       CASE WHEN current_setting('synchronous_standby_names') <> ''
             AND current_setting('synchronous_commit') IN ('off', 'local', 'remote_write')
            THEN set_config('synchronous_commit', 'on', true)
       END AS raised_to
