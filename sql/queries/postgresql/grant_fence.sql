-- A grant's fence advance: :resource moves up to the :token its lease service (:source) has just
-- issued under the database's :incarnation, and takes its tokens from that service from now on
-- (advance_fence(), run as the owner of the fence: the only way to raise a Redis-sourced fence); a
-- resource never claimed gets its fence row. 0 rows: a token at or above :token has written. The
-- grant holds the fence row, or the claim lock, already.
SELECT advanced FROM {schema}.advance_fence(:resource, CAST(:token AS bigint), :source, :incarnation) AS advanced
 WHERE advanced
