-- The name of the named lock every lease transaction (grant, renew, release) on :resource in this
-- database takes first, so that IS_USED_LOCK names the session inside one (InnoDB cannot tell
-- which session holds a row lock): 'fencemigrate-lease:<database>/<resource>', or its SHA-1 when
-- longer than MySQL's 64 characters. Taken before the writers' 'fencemigrate:' lock, never after.
SELECT IF(CHAR_LENGTH(n.name) <= 64, n.name, CONCAT('fencemigrate-lease:', SHA1(n.name))) AS name
  FROM (SELECT CONCAT('fencemigrate-lease:', DATABASE(), '/', :resource) AS name) n
