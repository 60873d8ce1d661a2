-- Extend the holder's lease by ttl_ms from now (Redis's clock) with PEXPIRE, only while the lease
-- key holds this holder's grant. An expired lease stays its holder's until someone else is granted
-- it: the lease key is set again from the last-grant record when that still names this grant.
-- KEYS[1] lease key, KEYS[2] last grant (hash); ARGV[1] holder, ARGV[2] token ('' for the
-- holder's current grant), ARGV[3] ttl_ms ('' for the TTL the grant was given or last renewed
-- with: the last-grant hash's, which issue.lua writes together with the lease key).
-- Returns {token, renewed after expiry (0/1), ttl_ms} or false when the lease is not the holder's.
local value = redis.call('GET', KEYS[1])
local last = redis.call('HMGET', KEYS[2], 'holder', 'token', 'state', 'ttl_ms')
local ttl = ARGV[3]
if ttl == '' then
    ttl = last[4]
end
local token
local after_expiry = 0
if value then
    local holder
    token, holder = split_lease(value)
    if holder ~= ARGV[1] or token == '0' or not token_matches(token, ARGV[2]) then
        return false
    end
    redis.call('PEXPIRE', KEYS[1], ttl)
else
    if last[1] ~= ARGV[1] or last[3] ~= 'held' or not token_matches(last[2], ARGV[2]) then
        return false
    end
    token = last[2]
    after_expiry = 1
    redis.call('SET', KEYS[1], token .. ':' .. ARGV[1], 'PX', ttl)
end
if last[2] == token then
    redis.call('HSET', KEYS[2], 'ttl_ms', ttl, 'expires_ms', plus_ms(now_ms(), ttl))
end
return {token, after_expiry, ttl}
