-- Take the lease key for a grant with SET NX PX. When this holder already has it, it is left as
-- it is: the grant replaces it once the token is issued (and a failed grant leaves it untouched).
-- KEYS[1] lease key; ARGV[1] holder, ARGV[2] ttl_ms.
-- Returns {'taken'} | {'already_held'} | {'busy', lease value, PTTL, Redis time in ms}.
if redis.call('SET', KEYS[1], '0:' .. ARGV[1], 'NX', 'PX', ARGV[2]) then
    return {'taken'}
end
local value = redis.call('GET', KEYS[1])
local _, holder = split_lease(value)
if holder == ARGV[1] then
    return {'already_held'}
end
return {'busy', value, redis.call('PTTL', KEYS[1]), now_ms()}
