-- Resources whose fence token is below the last token the built-in lease service issued (or
-- that have no fence row although a token was issued): every grant advances the fence to its
-- token in the same transaction, so only a lowered or deleted fence row leaves this.
SELECT l.resource, f.token AS fence_token, l.token AS lease_token
  FROM {schema}_lease l
  LEFT JOIN {schema}_agent_fence f ON f.resource = l.resource
 WHERE l.token > 0 AND (f.token IS NULL OR f.token < l.token)
 ORDER BY l.resource
