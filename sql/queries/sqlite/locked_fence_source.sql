-- Where the tokens of :resource come from, read by a grant or detach that holds the database's
-- write lock already (its BEGIN IMMEDIATE): no other writer can change it before it commits.
-- No row: never claimed nor granted.
SELECT token_source FROM {schema}_agent_fence WHERE resource = :resource
