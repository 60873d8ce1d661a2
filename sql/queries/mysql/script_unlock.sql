-- The end of a --sql script: its named lock of :resource (script_named_lock.sql) is released.
DO RELEASE_LOCK((SELECT IF(CHAR_LENGTH(n.name) <= 64, n.name, CONCAT('fencemigrate:', SHA1(n.name)))
                   FROM (SELECT CONCAT('fencemigrate:', DATABASE(), '/', :resource) AS name) n))
