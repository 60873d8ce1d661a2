-- The lease row of :resource for a grant, read again. No row lock on SQLite: the grant's
-- BEGIN IMMEDIATE already holds the database's only write lock until it commits.
SELECT holder, token, expires_at <= strftime('%Y-%m-%dT%H:%M:%fZ', 'now') AS expired
  FROM {schema}_lease
 WHERE resource = :resource
