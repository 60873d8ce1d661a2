-- Every fenced resource, the highest token that has written to it, and where its tokens come from.
SELECT resource, token, updated_at, token_source FROM {schema}.agent_fence ORDER BY resource
