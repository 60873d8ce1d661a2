-- The lease of :resource as the database's clock sees it now, how its grant was replicated, and
-- the fence token (no locks; one row even for a resource never leased or fenced). A lease granted
-- further in the future than its TTL (the clock was stepped back since) is implausible, and
-- counts as expired: the fence keeps safety.
SELECT l.holder, coalesce(l.token, 0) AS token, l.ttl_ms, l.granted_at, l.expires_at,
       coalesce(l.expires_at <= clock_timestamp(), false)
           OR coalesce(l.granted_at > clock_timestamp() + l.ttl_ms * interval '1 millisecond', false) AS expired,
       coalesce(l.granted_at > clock_timestamp() + l.ttl_ms * interval '1 millisecond', false) AS implausible,
       l.replication, f.token AS fence_token
  FROM (SELECT CAST(:resource AS text) AS resource) r
  LEFT JOIN {schema}.lease l ON l.resource = r.resource
  LEFT JOIN {schema}.agent_fence f ON f.resource = r.resource
