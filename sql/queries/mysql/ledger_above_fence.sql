-- Ledger rows no fenced run can leave: applied under a token above the fence token of their
-- resource, or with no fence row at all (every write claims the fence first, and the fence never
-- goes down). Only a lowered or deleted fence row, the guard triggers switched off, leaves them.
-- Adopted rows (method 'adopt', token 0: applied before fencing) claim nothing: left out.
SELECT a.version_table, a.revision, a.resource, a.applied_token, f.token AS fence_token
  FROM {schema}_applied_revision a
  LEFT JOIN {schema}_agent_fence f ON f.resource = a.resource
 WHERE a.method <> 'adopt' AND (f.token IS NULL OR a.applied_token > f.token)
 ORDER BY a.version_table, a.revision
