-- The event log for `fencemigrate timeline`, oldest first: every resource, or only :resource;
-- from :since_at (UTC) on, or from :since_ms milliseconds ago by the server's clock (NULL: no limit).
SELECT id, at, resource, kind, holder, token, revision, detail
  FROM {schema}_fence_event
 WHERE (:resource IS NULL OR resource = :resource)
   AND (:since_at IS NULL OR at >= :since_at)
   AND (:since_ms IS NULL OR at >= UTC_TIMESTAMP(6) - INTERVAL (:since_ms * 1000) MICROSECOND)
 ORDER BY at, id
