-- The end of a --sql script that took its own lease: the lease is released (as lease_release.sql)
-- and RELEASE logged, in one transaction; nothing when the lease is no longer the script's
-- (:holder, @fencemigrate_token).
START TRANSACTION;
INSERT INTO {schema}_fence_event (at, resource, kind, holder, token)
SELECT UTC_TIMESTAMP(6), l.resource, 'RELEASE', l.holder, l.token
  FROM {schema}_lease l
 WHERE l.resource = :resource AND l.holder = :holder AND l.token = @fencemigrate_token
   FOR UPDATE;
UPDATE {schema}_lease
   SET holder = NULL, ttl_ms = NULL, granted_at = NULL, expires_at = NULL
 WHERE resource = :resource AND holder = :holder AND token = @fencemigrate_token;
COMMIT
