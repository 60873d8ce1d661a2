-- :holder's grant of :resource (the one with :token, or its current one when NULL), read before
-- lease_renew or lease_release changes it: its token and whether it had expired by SQLite's
-- clock; no row when the lease is not theirs. (PostgreSQL's statements return this themselves;
-- SQLite has RETURNING only from 3.35. The transaction holds the write lock, so nothing can
-- change the row between this read and the write.)
SELECT token, coalesce(expires_at <= strftime('%Y-%m-%dT%H:%M:%fZ', 'now'), 0) AS was_expired
  FROM {schema}_lease
 WHERE resource = :resource
   AND holder = :holder
   AND token = coalesce(:token, token)
