-- The lease of :resource as the server's UTC clock sees it now, and the fence token (one row even
-- for a resource never leased or fenced). A lease granted further in the future than its TTL (the
-- clock was stepped back since) is implausible, and counts as expired: the fence keeps safety.
SELECT l.holder, COALESCE(l.token, 0) AS token, l.ttl_ms, l.granted_at, l.expires_at,
       COALESCE(l.expires_at <= UTC_TIMESTAMP(6), 0)
           OR COALESCE(l.granted_at > UTC_TIMESTAMP(6) + INTERVAL l.ttl_ms * 1000 MICROSECOND, 0) AS expired,
       COALESCE(l.granted_at > UTC_TIMESTAMP(6) + INTERVAL l.ttl_ms * 1000 MICROSECOND, 0) AS implausible,
       NULL AS replication, f.token AS fence_token
  FROM (SELECT 1 AS one) r
  LEFT JOIN {schema}_lease l ON l.resource = :resource
  LEFT JOIN {schema}_agent_fence f ON f.resource = :resource
