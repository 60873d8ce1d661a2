-- The highest token that has written to :resource (no row if none has).
SELECT token FROM {schema}_agent_fence WHERE resource = :resource
