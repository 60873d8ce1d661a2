-- Release this session's named lock :name (NULL or 0 when it does not hold it).
SELECT RELEASE_LOCK(:name)
