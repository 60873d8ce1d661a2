-- The lease of :resource as the database's clock sees it now, how its grant was replicated, and
-- the fence token (no locks; one row even for a resource never leased or fenced).
SELECT l.holder, coalesce(l.token, 0) AS token, l.ttl_ms, l.granted_at, l.expires_at,
       coalesce(l.expires_at <= clock_timestamp(), false) AS expired,
       l.replication, f.token AS fence_token
  FROM (SELECT CAST(:resource AS text) AS resource) r
  LEFT JOIN {schema}.lease l ON l.resource = r.resource
  LEFT JOIN {schema}.agent_fence f ON f.resource = r.resource
