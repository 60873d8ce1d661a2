-- The first grant of a resource never claimed: its fence row, at the :token its lease service
-- (:source) issued. 0 rows when the row exists.
INSERT INTO {schema}_agent_fence (resource, token, token_source)
SELECT :resource, :token, :source
 WHERE NOT EXISTS (SELECT 1 FROM {schema}_agent_fence WHERE resource = :resource)
