-- The lease row of :resource for a grant, locked until the grant commits.
SELECT holder, token, expires_at <= UTC_TIMESTAMP(6) AS expired
  FROM {schema}_lease
 WHERE resource = :resource
   FOR UPDATE
