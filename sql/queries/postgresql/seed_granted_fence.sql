-- The first grant of a resource never claimed: its fence row, at the :token its lease service
-- (:source) issued under the database's :incarnation. 0 rows when the row exists.
INSERT INTO {schema}.agent_fence (resource, token, token_source, incarnation)
VALUES (:resource, :token, :source, :incarnation)
ON CONFLICT (resource) DO NOTHING
