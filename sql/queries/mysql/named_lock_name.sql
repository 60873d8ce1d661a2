-- The name of the named lock that serialises fencemigrate writers on :resource in this database:
-- 'fencemigrate:<database>/<resource>', or its SHA-1 when longer than MySQL's 64 characters.
-- Named locks are server-wide, hence the database in the name.
SELECT IF(CHAR_LENGTH(n.name) <= 64, n.name, CONCAT('fencemigrate:', SHA1(n.name))) AS name
  FROM (SELECT CONCAT('fencemigrate:', DATABASE(), '/', :resource) AS name) n
