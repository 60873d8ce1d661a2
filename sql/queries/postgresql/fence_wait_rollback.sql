-- A slice of the wait for the fence ran out (lock_timeout): undo it, the transaction goes on.
ROLLBACK TO SAVEPOINT fencemigrate_fence_wait
