-- The fence token of :resource (no row: never claimed).
SELECT token FROM {schema}.agent_fence WHERE resource = :resource
