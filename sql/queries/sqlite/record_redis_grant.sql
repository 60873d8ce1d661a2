-- A Redis grant's record of the :token it has just issued for :resource (the table's only writer),
-- in the grant's transaction before its fence advance (grant_fence.sql): the lease guard refuses
-- a fence whose tokens come from Redis above the recorded token. Inserts the row, or raises its
-- token; never lowers it (the row as inserted is never below the recorded token, which the
-- monotonic guard's BEFORE INSERT trigger checks before the conflict is seen).
INSERT INTO {schema}_redis_grant (resource, token)
VALUES (:resource, max(:token, coalesce((SELECT g.token FROM {schema}_redis_grant g WHERE g.resource = :resource), 0)))
ON CONFLICT (resource) DO UPDATE
   SET token = excluded.token, granted_at = strftime('%Y-%m-%dT%H:%M:%fZ', 'now')
 WHERE excluded.token > {schema}_redis_grant.token
