-- --preempt: end the session :connection_id, a stale pre-check writer holding the resource's
-- named lock. The server rolls back its open transaction and releases the lock; a revision it was
-- running stops midway and stays marked dirty.
KILL CONNECTION :connection_id
