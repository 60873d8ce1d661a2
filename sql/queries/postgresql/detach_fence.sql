-- `lease detach`: :resource takes external tokens (--token) above its fence token from now on.
-- 0 rows: it has no fence row.
UPDATE {schema}.agent_fence SET token_source = 'external' WHERE resource = :resource
