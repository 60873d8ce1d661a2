-- --preempt: end the session :connection_id (a backend pid), a stale pre-check writer holding the
-- resource's named lock, waiting up to :wait_ms for it to exit. Its open transaction rolls back and
-- the lock is released; a revision it was running stops midway and stays marked dirty.
SELECT pg_terminate_backend(:connection_id, :wait_ms)
