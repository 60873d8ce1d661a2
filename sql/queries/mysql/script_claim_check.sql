-- A --sql script written with --token: after its claim (claim.sql, seed_fence.sql), refused when a
-- revision of :resource is dirty (DIRTY), or unless the fence now holds :token (FENCED: a higher
-- token has written, or the resource's lease service never issued it).
SET @fencemigrate_refusal = CASE
    WHEN EXISTS (SELECT 1 FROM {schema}_applied_revision a WHERE a.resource = :resource AND a.state <> 'applied')
    THEN CONCAT('DIRTY: a revision of ', :resource, ' is marked dirty (its DDL started and never finished): ',
                'see fencemigrate state, then fencemigrate resolve; nothing was applied')
    WHEN NOT EXISTS (SELECT 1 FROM {schema}_agent_fence f WHERE f.resource = :resource AND f.token = :token)
    THEN CONCAT('FENCED: a newer token has written to ', :resource, ' since token ', COALESCE(:token, 'NULL'),
                ' was issued (or its lease service never issued it). This is NOT a transient error: do not retry; ',
                're-read the state (fencemigrate state) and re-plan. Nothing was applied')
    ELSE NULL
END
