-- An offline script's release of its own lease (script_grant_function.sql), after its last revision,
-- in that revision's transaction: as lease_release.sql frees a lease, logged RELEASE as the lease
-- service logs it; wakes the runners waiting for the lease when the transaction commits. Nothing
-- when the lease is no longer the script's (the script's claims were FENCED before this).
WITH released AS (
    UPDATE {schema}.lease l
       SET holder = NULL, ttl_ms = NULL, granted_at = NULL, expires_at = NULL
      FROM pg_temp.fencemigrate_script_lease s
     WHERE l.resource = s.resource AND l.holder = s.holder AND l.token = s.token
    RETURNING l.resource, s.holder, l.token
)
SELECT r.token AS released_token,
       {schema}.log_event(NULL, r.resource, 'RELEASE', r.holder, r.token, NULL, NULL) AS logged,
       pg_notify('fencemigrate_lease', r.resource) AS woken
  FROM released r
