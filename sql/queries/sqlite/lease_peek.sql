-- The lease of :resource as SQLite's clock sees it now, and the fence token (one row even for a
-- resource never leased or fenced). Times are ISO-8601 UTC text of one form, so they compare as text.
SELECT l.holder, coalesce(l.token, 0) AS token, l.ttl_ms, l.granted_at, l.expires_at,
       coalesce(l.expires_at <= strftime('%Y-%m-%dT%H:%M:%fZ', 'now'), 0) AS expired,
       NULL AS replication, f.token AS fence_token
  FROM (SELECT :resource AS resource) r
  LEFT JOIN {schema}_lease l ON l.resource = r.resource
  LEFT JOIN {schema}_agent_fence f ON f.resource = r.resource
