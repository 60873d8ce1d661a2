-- Per fenced resource: the incarnation of the database its last grant ran on, and how the lease
-- row's grant was replicated ('synchronous': confirmed by a standby; 'asynchronous'; NULL: not
-- leased here, or granted before fence schema 0.6). Fence schema 0.6 and later.
SELECT f.resource, f.incarnation, l.replication
  FROM {schema}.agent_fence f
  LEFT JOIN {schema}.lease l ON l.resource = f.resource
