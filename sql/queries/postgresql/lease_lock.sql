-- Lock the lease row of :resource for a grant (after the fence row) and read it again.
SELECT holder, token, expires_at <= clock_timestamp() AS expired
  FROM {schema}.lease
 WHERE resource = :resource
   FOR UPDATE
