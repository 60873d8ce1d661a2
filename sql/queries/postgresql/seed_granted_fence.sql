-- The first grant of a resource never claimed: its fence row, at the :token its lease service
-- (:source) issued under the database's :incarnation. 0 rows when the row exists (grant_fence.sql's
-- advance_fence() seeds it already: this finds it there).
SELECT advanced FROM {schema}.advance_fence(:resource, CAST(:token AS bigint), :source, :incarnation) AS advanced
 WHERE advanced
