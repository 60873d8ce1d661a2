-- A --sql script's release of its own lease (script_grant_objects.sql), after its last version
-- write, in that transaction: as lease_release.sql frees a lease, logged RELEASE as the lease
-- service logs it. Nothing when the lease is no longer the script's.
INSERT INTO {schema}_fence_event (resource, kind, holder, token)
SELECT l.resource, 'RELEASE', l.holder, l.token
  FROM {schema}_lease l
  JOIN temp.fencemigrate_script_lease s ON s.resource = l.resource AND s.holder = l.holder AND s.token = l.token;
UPDATE {schema}_lease
   SET holder = NULL, ttl_ms = NULL, granted_at = NULL, expires_at = NULL
 WHERE EXISTS (SELECT 1 FROM temp.fencemigrate_script_lease s
                WHERE s.resource = {schema}_lease.resource AND s.holder = {schema}_lease.holder
                  AND s.token = {schema}_lease.token)
