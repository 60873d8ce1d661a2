-- A Redis grant's record of the :token it has just issued for :resource (the table's only writer),
-- in the grant's transaction before its fence advance (grant_fence.sql): the lease guard refuses
-- a fence whose tokens come from Redis above the recorded token. Inserts the row, or raises its
-- token; never lowers it (MySQL assigns left to right: granted_at is set while token still holds
-- the recorded value).
INSERT INTO {schema}_redis_grant (resource, token, granted_at)
VALUES (:resource, :token, UTC_TIMESTAMP(6))
ON DUPLICATE KEY UPDATE
       granted_at = IF(VALUES(token) > token, VALUES(granted_at), granted_at),
       token = GREATEST(token, VALUES(token))
