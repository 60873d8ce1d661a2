-- The first grant of a resource never claimed: its fence row, at the :token its lease service
-- (:source) issued. 0 rows when the row exists.
INSERT INTO {schema}_agent_fence (resource, token, token_source, updated_at)
SELECT :resource, :token, :source, UTC_TIMESTAMP(6) FROM DUAL
 WHERE NOT EXISTS (SELECT 1 FROM {schema}_agent_fence WHERE resource = :resource)
