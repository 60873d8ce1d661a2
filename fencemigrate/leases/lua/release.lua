-- Free the holder's lease: DEL the lease key only while it holds this holder's grant (or, once
-- expired, while the last-grant record still names it), and mark the last grant released.
-- KEYS[1] lease key, KEYS[2] last grant (hash); ARGV[1] holder, ARGV[2] token ('' for the
-- holder's current grant).
-- Returns the released grant's token, or false when the lease is not the holder's.
local value = redis.call('GET', KEYS[1])
local token
if value then
    local holder
    token, holder = split_lease(value)
    if holder ~= ARGV[1] or token == '0' or not token_matches(token, ARGV[2]) then
        return false
    end
    redis.call('DEL', KEYS[1])
else
    local last = redis.call('HMGET', KEYS[2], 'holder', 'token', 'state')
    if last[1] ~= ARGV[1] or last[3] ~= 'held' or not token_matches(last[2], ARGV[2]) then
        return false
    end
    token = last[2]
end
if redis.call('HGET', KEYS[2], 'token') == token then
    redis.call('HSET', KEYS[2], 'state', 'released')
end
return token
