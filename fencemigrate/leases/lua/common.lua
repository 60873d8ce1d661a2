-- Shared by every script below (prepended when a script is loaded).
--
-- The lease key holds '<token>:<holder>' with a PX expiry; token '0' marks a grant whose token
-- is not issued yet. Tokens are handled as decimal strings: Lua numbers are doubles and would
-- round tokens above 2^53.

local function split_lease(value)
    local colon = string.find(value, ':', 1, true)
    return string.sub(value, 1, colon - 1), string.sub(value, colon + 1)
end

-- Is token a (the grant being renewed or released)? An empty wanted token means "any grant".
local function token_matches(token, wanted)
    return wanted == '' or token == wanted
end

-- a > b for non-negative decimal integers without leading zeros, compared exactly.
local function greater(a, b)
    if #a ~= #b then
        return #a > #b
    end
    return a > b
end

-- Redis's own clock, in milliseconds since the epoch, as a decimal string.
local function now_ms()
    local time = redis.call('TIME')
    return string.format('%.0f', tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000))
end

local function plus_ms(ms, delta)
    return string.format('%.0f', tonumber(ms) + tonumber(delta))
end
