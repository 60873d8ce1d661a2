-- Held leases granted further in the future than their TTL by SQLite's clock (a writer whose clock
-- was ahead): implausible, counted as expired (lease_peek.sql).
SELECT resource, holder, token, granted_at, ttl_ms
  FROM {schema}_lease
 WHERE holder IS NOT NULL
   AND granted_at > strftime('%Y-%m-%dT%H:%M:%fZ', 'now', '+' || (ttl_ms / 1000.0) || ' seconds')
 ORDER BY resource
