-- The first grant of a resource never claimed: its fence row, at the :token its lease service
-- (:source) issued. 0 rows when the row exists.
INSERT INTO {schema}.agent_fence (resource, token, token_source) VALUES (:resource, :token, :source)
ON CONFLICT (resource) DO NOTHING
