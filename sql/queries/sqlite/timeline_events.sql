-- The event log for `fencemigrate timeline`, oldest first: every resource, or only :resource;
-- from :since_at (ISO-8601 text) on, or from :since_ms milliseconds ago by SQLite's clock
-- (NULL: no limit). Times are compared as UTC text of one form, however they were written.
SELECT id, at, resource, kind, holder, token, revision, detail
  FROM {schema}_fence_event
 WHERE (:resource IS NULL OR resource = :resource)
   AND (:since_at IS NULL
        OR strftime('%Y-%m-%dT%H:%M:%fZ', at) >= strftime('%Y-%m-%dT%H:%M:%fZ', :since_at))
   AND (:since_ms IS NULL
        OR strftime('%Y-%m-%dT%H:%M:%fZ', at)
           >= strftime('%Y-%m-%dT%H:%M:%fZ', 'now', '-' || (:since_ms / 1000.0) || ' seconds'))
 ORDER BY strftime('%Y-%m-%dT%H:%M:%fZ', at), id
