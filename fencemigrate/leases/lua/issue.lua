-- Issue the token of a grant, unless another holder has taken the lease key meanwhile (this
-- holder's own key may have expired while the grant waited for the fence: then it is taken again).
-- The counter is first raised to the database fence's token, then INCR'd, so the token is above
-- every token the fence has seen even when Redis lost the counter (FLUSHALL, a restart without
-- persistence).
-- KEYS[1] lease key, KEYS[2] token counter, KEYS[3] last grant (hash);
-- ARGV[1] holder, ARGV[2] fence token ('0' when the resource was never fenced), ARGV[3] ttl_ms.
-- Returns {'busy', lease value, PTTL, Redis time in ms}
--       | {'issued', token, seeded (0/1), Redis time in ms, the last grant it replaced: holder,
--          token, ttl_ms, granted_ms, expires_ms, state (each false when absent)}.
local value = redis.call('GET', KEYS[1])
if value then
    local _, holder = split_lease(value)
    if holder ~= ARGV[1] then
        return {'busy', value, redis.call('PTTL', KEYS[1]), now_ms()}
    end
end
local counter = redis.call('GET', KEYS[2]) or '0'
local seeded = 0
if greater(ARGV[2], counter) then
    redis.call('SET', KEYS[2], ARGV[2])
    seeded = 1
end
redis.call('INCR', KEYS[2])
local token = redis.call('GET', KEYS[2])
redis.call('SET', KEYS[1], token .. ':' .. ARGV[1], 'PX', ARGV[3])
local previous = redis.call('HMGET', KEYS[3], 'holder', 'token', 'ttl_ms', 'granted_ms', 'expires_ms', 'state')
local now = now_ms()
redis.call('DEL', KEYS[3])
redis.call('HSET', KEYS[3], 'holder', ARGV[1], 'token', token, 'ttl_ms', ARGV[3],
           'granted_ms', now, 'expires_ms', plus_ms(now, ARGV[3]), 'state', 'held')
return {'issued', token, seeded, now, previous[1], previous[2], previous[3], previous[4], previous[5], previous[6]}
