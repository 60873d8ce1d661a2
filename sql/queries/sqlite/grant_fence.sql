-- A grant's fence advance: :resource moves up to the :token its lease service (:source) has just
-- issued, and takes its tokens from that service from now on (0 rows: no fence row yet, see
-- seed_granted_fence.sql). The grant holds the fence row, or the claim lock, already.
UPDATE {schema}_agent_fence
   SET token = :token, token_source = :source, updated_at = strftime('%Y-%m-%dT%H:%M:%fZ', 'now')
 WHERE resource = :resource AND token < :token
