-- A --sql script's own grant, its checks (script_grant.sql writes it once they pass): in the
-- grant's transaction, under the lease lock and the named lock of :resource, the lease row locked.
-- Refused, in this order: a resource whose tokens come from Redis; a live lease of another holder
-- than :holder (busy at once: the script already waited --wait for the locks); a dirty revision
-- (DIRTY, as pre-check mode); heads other than :heads (sorted, comma-separated; '' for none;
-- @fencemigrate_heads from script_heads.sql), FENCED.
START TRANSACTION;
INSERT INTO {schema}_lease (resource, token) VALUES (:resource, 0) ON DUPLICATE KEY UPDATE token = token;
SELECT l.token INTO @fencemigrate_counter FROM {schema}_lease l WHERE l.resource = :resource FOR UPDATE;
SET @fencemigrate_refusal = CASE
    WHEN EXISTS (SELECT 1 FROM {schema}_agent_fence f WHERE f.resource = :resource AND f.token_source = 'redis')
    THEN CONCAT('fencemigrate: the tokens of ', :resource, ' come from Redis: a script takes its lease from the ',
                'database''s lease service only; write it with --token N from a Redis grant; nothing was applied')
    WHEN EXISTS (SELECT 1 FROM {schema}_lease l
                  WHERE l.resource = :resource AND l.holder IS NOT NULL AND l.holder <> :holder
                    AND l.expires_at > UTC_TIMESTAMP(6)
                    AND NOT COALESCE(l.granted_at > UTC_TIMESTAMP(6) + INTERVAL l.ttl_ms * 1000 MICROSECOND, 0))
    THEN CONCAT('lease on ', :resource, ' is busy: another holder''s lease is live (fencemigrate lease status ',
                'shows it); this is transient, try again later; nothing was applied')
    WHEN EXISTS (SELECT 1 FROM {schema}_applied_revision a WHERE a.resource = :resource AND a.state <> 'applied')
    THEN CONCAT('DIRTY: a revision of ', :resource, ' is marked dirty (its DDL started and never finished): ',
                'see fencemigrate state, then fencemigrate resolve; nothing was applied')
    WHEN NOT (@fencemigrate_heads <=> :heads)
    THEN CONCAT('FENCED: the heads are ', IF(COALESCE(@fencemigrate_heads, '') = '', 'base', @fencemigrate_heads),
                ', not ', IF(:heads = '', 'base', :heads), ', the ones this script was written from (resource ',
                :resource, '). This is NOT a transient error: do not retry; re-read the state (fencemigrate ',
                'state) and re-plan. Nothing was applied')
    ELSE NULL
END
