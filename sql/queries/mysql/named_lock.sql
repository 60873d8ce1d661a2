-- Take the named lock :name for this session, waiting at most :timeout_s seconds: 1 when taken
-- (also when this session holds it already), 0 on timeout. Held until released or until the
-- session ends, so a writer that dies releases it with its connection.
SELECT GET_LOCK(:name, :timeout_s)
