-- The fence was taken within the slice: keep what it took (its locks stay until the transaction ends).
RELEASE SAVEPOINT fencemigrate_fence_wait
