-- Every fenced resource and the highest token that has written to it.
SELECT resource, token, updated_at FROM {schema}_agent_fence ORDER BY resource
