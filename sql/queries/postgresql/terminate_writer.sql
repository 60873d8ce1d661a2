-- --preempt while a run waits for the fence: end the session :pid, a writer under an older token that
-- holds it (its transaction rolls back completely), waiting up to :wait_ms for it to exit.
SELECT pg_terminate_backend(:pid, :wait_ms)
