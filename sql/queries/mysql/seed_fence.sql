-- The first claim on a resource: its fence row, with :token. 0 rows when the row exists.
INSERT INTO {schema}_agent_fence (resource, token, updated_at)
SELECT :resource, :token, UTC_TIMESTAMP(6) FROM DUAL
 WHERE NOT EXISTS (SELECT 1 FROM {schema}_agent_fence WHERE resource = :resource)
