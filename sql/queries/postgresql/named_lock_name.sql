-- How pre-check mode's named lock on :resource is shown to people (the lock itself is a pair of
-- advisory locks keyed by the resource's lock key: see named_lock() in the fence schema).
SELECT 'fencemigrate:' || current_database() || '/' || :resource
