-- Release this session's named lock on :resource.
SELECT {schema}.named_lock_release(:resource)
