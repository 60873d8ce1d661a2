-- Before one slice of a wait for the fence (lock_timeout bounds it): a lock wait that runs out
-- rolls back to here, and the migration's transaction goes on.
SAVEPOINT fencemigrate_fence_wait
