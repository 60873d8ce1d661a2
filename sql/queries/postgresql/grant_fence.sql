-- A grant's fence advance: :resource moves up to the :token its lease service (:source) has just
-- issued under the database's :incarnation, and takes its tokens from that service from now on
-- (0 rows: no fence row yet, see seed_granted_fence.sql). The grant holds the fence row, or the
-- claim lock, already.
UPDATE {schema}.agent_fence
   SET token = :token, token_source = :source, incarnation = :incarnation, updated_at = now()
 WHERE resource = :resource AND token < :token
