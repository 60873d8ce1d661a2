-- Claim the fence for :resource with :token, in its own transaction before the run's DDL:
-- 0 rows means a higher token has written (FENCED), that :token is above the fence of a resource
-- whose lease service never issued it (FENCED, see fence_source.sql), or that the resource has no fence row yet
-- (seed_fence.sql). updated_at moves only when the token goes up (MySQL assigns left to right:
-- updated_at is set while token still holds the old value). SQLAlchemy connects with
-- CLIENT_FOUND_ROWS, so a row claimed again under the same token counts as 1.
UPDATE {schema}_agent_fence
   SET updated_at = IF(token < :token, UTC_TIMESTAMP(6), updated_at),
       token = :token
 WHERE resource = :resource AND token <= :token
   AND (token_source = 'external' OR token = :token)
