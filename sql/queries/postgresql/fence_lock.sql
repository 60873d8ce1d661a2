-- Lock the fence row of :resource: waits for an in-flight migration's transaction, which holds it.
SELECT token FROM {schema}.agent_fence WHERE resource = :resource FOR UPDATE
