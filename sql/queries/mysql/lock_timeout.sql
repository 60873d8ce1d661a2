-- Bound how long this session waits for a row lock (whole seconds, at least 1): a grant sets it
-- to what is left of --wait.
SET SESSION innodb_lock_wait_timeout = :timeout_s
