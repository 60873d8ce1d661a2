-- :holder's grant of :resource (the one with :token, or its current one when NULL), locked and
-- read before lease_renew or lease_release changes it: its token and whether it had expired by
-- the server's clock; no row when the lease is not theirs (MySQL's UPDATE has no RETURNING).
SELECT token, COALESCE(expires_at <= UTC_TIMESTAMP(6), 0) AS was_expired
  FROM {schema}_lease
 WHERE resource = :resource
   AND holder = :holder
   AND token = COALESCE(:token, token)
   FOR UPDATE
