-- Undo a grant whose database half failed: free the lease key if it still holds what this grant
-- set, and put back the last-grant record if the grant had replaced it.
-- KEYS[1] lease key, KEYS[2] last grant (hash); ARGV[1] the lease value this grant set,
-- ARGV[2] the token issued ('' when none was), ARGV[3..] the previous last grant as field/value pairs.
if redis.call('GET', KEYS[1]) == ARGV[1] then
    redis.call('DEL', KEYS[1])
end
if ARGV[2] ~= '' and redis.call('HGET', KEYS[2], 'token') == ARGV[2] then
    redis.call('DEL', KEYS[2])
    if #ARGV > 2 then
        redis.call('HSET', KEYS[2], unpack(ARGV, 3))
    end
end
return 1
