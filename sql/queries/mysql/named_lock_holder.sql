-- The connection id of the session holding the named lock :name (NULL when free).
SELECT IS_USED_LOCK(:name)
