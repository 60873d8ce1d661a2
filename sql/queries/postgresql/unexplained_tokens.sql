-- Token counters that no recorded grant explains: a lease row's counter, or the fence token of a
-- resource whose tokens come from a lease service, with no GRANT event of that token (every grant
-- logs one in its own transaction, see the lease guard). Only a write behind the lease service's
-- back leaves this; a counter raised so is where every later grant starts (kind: 'lease', 'fence').
SELECT 'lease' AS kind, l.resource, l.token, NULL AS token_source
  FROM {schema}.lease l
 WHERE l.token > 0
   AND NOT EXISTS (SELECT 1 FROM {schema}.fence_event e
                    WHERE e.resource = l.resource AND e.kind = 'GRANT' AND e.token = l.token)
UNION ALL
SELECT 'fence' AS kind, f.resource, f.token, f.token_source
  FROM {schema}.agent_fence f
 WHERE f.token_source <> 'external'
   AND NOT EXISTS (SELECT 1 FROM {schema}.fence_event e
                    WHERE e.resource = f.resource AND e.kind = 'GRANT' AND e.token = f.token)
 ORDER BY resource, kind DESC
