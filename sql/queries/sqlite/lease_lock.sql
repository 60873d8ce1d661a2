-- The lease row of :resource for a grant, read again. No row lock on SQLite: the grant's
-- BEGIN IMMEDIATE already holds the database's only write lock until it commits. A lease granted
-- further in the future than its TTL is implausible (lease_peek.sql) and counts as expired.
SELECT holder, token, granted_at, expires_at,
       expires_at <= strftime('%Y-%m-%dT%H:%M:%fZ', 'now')
           OR coalesce(granted_at > strftime('%Y-%m-%dT%H:%M:%fZ', 'now', '+' || (ttl_ms / 1000.0) || ' seconds'), 0)
           AS expired,
       coalesce(granted_at > strftime('%Y-%m-%dT%H:%M:%fZ', 'now', '+' || (ttl_ms / 1000.0) || ' seconds'), 0)
           AS implausible
  FROM {schema}_lease
 WHERE resource = :resource
