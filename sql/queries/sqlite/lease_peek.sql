-- The lease of :resource as SQLite's clock sees it now, and the fence token (one row even for a
-- resource never leased or fenced). Times are ISO-8601 UTC text of one form, so they compare as text.
-- A lease granted further in the future than its TTL (a writer whose clock was ahead: SQLite's
-- clock is each writer's own) is implausible, and counts as expired: the fence keeps safety.
SELECT l.holder, coalesce(l.token, 0) AS token, l.ttl_ms, l.granted_at, l.expires_at,
       coalesce(l.expires_at <= strftime('%Y-%m-%dT%H:%M:%fZ', 'now'), 0)
           OR coalesce(l.granted_at > strftime('%Y-%m-%dT%H:%M:%fZ', 'now', '+' || (l.ttl_ms / 1000.0) || ' seconds'), 0)
           AS expired,
       coalesce(l.granted_at > strftime('%Y-%m-%dT%H:%M:%fZ', 'now', '+' || (l.ttl_ms / 1000.0) || ' seconds'), 0)
           AS implausible,
       NULL AS replication, f.token AS fence_token
  FROM (SELECT :resource AS resource) r
  LEFT JOIN {schema}_lease l ON l.resource = r.resource
  LEFT JOIN {schema}_agent_fence f ON f.resource = r.resource
