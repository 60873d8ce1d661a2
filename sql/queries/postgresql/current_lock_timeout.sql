-- This session's lock_timeout now, restored after a wait for the fence set its own slices.
SELECT current_setting('lock_timeout')
