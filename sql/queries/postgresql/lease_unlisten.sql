-- The wait is over (granted, busy or nothing left to do).
UNLISTEN fencemigrate_lease
