-- Where each fenced resource's tokens come from ('external', 'lease service', 'redis'); fence
-- schema 0.4 and later.
SELECT resource, token_source FROM {schema}_agent_fence
