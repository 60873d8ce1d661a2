-- The event log for `fencemigrate timeline`, oldest first: every resource, or only :resource;
-- from :since_at on, or from :since_ms milliseconds ago by the database's clock (NULL: no limit).
SELECT id, at, resource, kind, holder, token, revision, detail
  FROM {schema}.fence_event
 WHERE (CAST(:resource AS text) IS NULL OR resource = CAST(:resource AS text))
   AND (CAST(:since_at AS timestamptz) IS NULL OR at >= CAST(:since_at AS timestamptz))
   AND (CAST(:since_ms AS bigint) IS NULL
        OR at >= clock_timestamp() - CAST(:since_ms AS bigint) * interval '1 millisecond')
 ORDER BY at, id
