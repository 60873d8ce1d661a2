-- The lease as Redis's clock sees it now, read atomically.
-- KEYS[1] lease key, KEYS[2] token counter, KEYS[3] last grant (hash).
-- Returns {lease value, PTTL, counter, Redis time in ms, last grant: holder, token, ttl_ms,
--          granted_ms, expires_ms, state} (false where absent).
local last = redis.call('HMGET', KEYS[3], 'holder', 'token', 'ttl_ms', 'granted_ms', 'expires_ms', 'state')
return {redis.call('GET', KEYS[1]), redis.call('PTTL', KEYS[1]), redis.call('GET', KEYS[2]), now_ms(),
        last[1], last[2], last[3], last[4], last[5], last[6]}
