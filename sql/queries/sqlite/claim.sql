-- Claim the fence for :resource with :token, in the migration's own transaction before its DDL:
-- 0 rows means a higher token has written (FENCED), that :token is above the fence of a resource
-- whose lease service never issued it (FENCED, see fence_source.sql), or that the resource has no fence row yet
-- (seed_fence.sql). updated_at moves only when the token goes up.
UPDATE {schema}_agent_fence
   SET token = :token,
       updated_at = iif(token < :token, strftime('%Y-%m-%dT%H:%M:%fZ', 'now'), updated_at)
 WHERE resource = :resource AND token <= :token
   AND (token_source = 'external' OR token = :token)
