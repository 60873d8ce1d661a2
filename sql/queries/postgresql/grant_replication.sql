-- Per fenced resource: the incarnation of the database its last grant ran on, and how its lease's
-- grant was replicated while the lease has a holder ('synchronous': confirmed by a standby;
-- 'asynchronous'; NULL: free, as after a grant released because no standby confirmed it, not
-- leased here, or granted before fence schema 0.6). Fence schema 0.6 and later.
SELECT f.resource, f.incarnation, CASE WHEN l.holder IS NOT NULL THEN l.replication END AS replication
  FROM {schema}.agent_fence f
  LEFT JOIN {schema}.lease l ON l.resource = f.resource
