-- The fence token of :resource and where its tokens come from ('external', 'lease service',
-- 'redis'); no row: never claimed nor granted.
SELECT token, token_source FROM {schema}.agent_fence WHERE resource = :resource
