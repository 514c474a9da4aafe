-- Fixed-window counter shared by every worker.
-- KEYS[1]: window key prefix; ARGV: limit, period_ms, now_ms.
-- Returns 0 when admitted, else the end of the current window (ms) to delay to.
local limit, period, now = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local index = math.floor(now / period)
local key = KEYS[1] .. ":" .. index
local count = redis.call("incr", key)
if count == 1 then
    redis.call("pexpire", key, period * 2)
end
if count > limit then
    redis.call("decr", key)
    return (index + 1) * period
end
return 0
