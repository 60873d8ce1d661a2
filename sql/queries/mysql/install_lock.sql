-- Serialise first runs installing the fence schema in this database: the named lock
-- 'fencemigrate-install:<database>', waited for at most :timeout_s seconds (1 when taken).
SELECT GET_LOCK(CONCAT('fencemigrate-install:', DATABASE()), :timeout_s)
