-- Where the tokens of :resource come from, read by a grant or detach that has locked the fence
-- row already (fence_lock.sql): the committed value, which cannot change before it commits.
-- No row: never claimed nor granted.
SELECT token_source FROM {schema}.agent_fence WHERE resource = :resource FOR UPDATE
