-- A --sql script's own grant (its checks passed: script_grant_check.sql), as the built-in lease
-- service grants (fencemigrate/leases/database.py): another holder's lapsed lease is logged EXPIRE
-- (released first when implausible: granted further in the future than its TTL), the next token
-- issued above the lease counter and the fence into @fencemigrate_token, the lease granted to
-- :holder for :ttl_ms by the server's clock, the fence advanced to the token, GRANT logged; then
-- the grant commits and the lease lock is released. Every write goes through the lease guard.
INSERT INTO {schema}_fence_event (at, resource, kind, holder, token, detail)
SELECT IF(x.implausible, UTC_TIMESTAMP(6), x.expires_at), x.resource, 'EXPIRE', x.holder, x.token,
       IF(x.implausible, CONCAT('{"implausible": true, "granted_at": "', x.granted_at, '", "expires_at": "',
                                x.expires_at, '"}'), NULL)
  FROM (SELECT l.resource, l.holder, l.token, l.granted_at, l.expires_at,
               COALESCE(l.granted_at > UTC_TIMESTAMP(6) + INTERVAL l.ttl_ms * 1000 MICROSECOND, 0) AS implausible
          FROM {schema}_lease l
         WHERE l.resource = :resource AND l.holder IS NOT NULL AND l.holder <> :holder) x;
UPDATE {schema}_lease
   SET holder = NULL, ttl_ms = NULL, granted_at = NULL, expires_at = NULL
 WHERE resource = :resource AND holder IS NOT NULL
   AND granted_at > UTC_TIMESTAMP(6) + INTERVAL ttl_ms * 1000 MICROSECOND;
SET @fencemigrate_token = (
    SELECT GREATEST(l.token, COALESCE((SELECT f.token FROM {schema}_agent_fence f WHERE f.resource = :resource), 0)) + 1
      FROM {schema}_lease l WHERE l.resource = :resource);
UPDATE {schema}_lease
   SET holder = :holder, token = @fencemigrate_token, ttl_ms = :ttl_ms,
       granted_at = UTC_TIMESTAMP(6), expires_at = UTC_TIMESTAMP(6) + INTERVAL (:ttl_ms * 1000) MICROSECOND
 WHERE resource = :resource;
UPDATE {schema}_agent_fence
   SET token = @fencemigrate_token, token_source = 'lease service', updated_at = UTC_TIMESTAMP(6)
 WHERE resource = :resource AND token < @fencemigrate_token;
INSERT INTO {schema}_agent_fence (resource, token, updated_at, token_source)
SELECT :resource, @fencemigrate_token, UTC_TIMESTAMP(6), 'lease service' FROM DUAL
 WHERE NOT EXISTS (SELECT 1 FROM {schema}_agent_fence WHERE resource = :resource);
INSERT INTO {schema}_fence_event (at, resource, kind, holder, token, detail)
VALUES (UTC_TIMESTAMP(6), :resource, 'GRANT', :holder, @fencemigrate_token, CONCAT('{"ttl_ms": ', :ttl_ms, '}'));
COMMIT;
DO RELEASE_LOCK((SELECT IF(CHAR_LENGTH(n.name) <= 64, n.name, CONCAT('fencemigrate-lease:', SHA1(n.name)))
                   FROM (SELECT CONCAT('fencemigrate-lease:', DATABASE(), '/', :resource) AS name) n))
