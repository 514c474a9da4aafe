-- Fixed-window counter that, when the current window is full, reserves a start in the
-- first future window with room, so a throttled job is delayed once, to its own window,
-- instead of waking with every other throttled job at each window's end.
-- A reservation whose window passed before its job woke (a late wake on a busy queue) was
-- counted in that window but never used: it is counted in ``<prefix>:lapsed`` (kept a day)
-- and the start is counted anew.
-- KEYS[1]: window key prefix.
-- ARGV: limit, period_ms, now_ms, reserved_index (-1: none), max_ahead (windows).
-- Returns {0, index} admitted now (counted, or counted when reserved);
--         {1, index} reserved in window ``index``: run at its start;
--         {2, index} nothing free within max_ahead: try again at window ``index``.
local prefix = KEYS[1]
local limit, period, now = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local reserved, max_ahead = tonumber(ARGV[4]), tonumber(ARGV[5])
local index = math.floor(now / period)

if reserved == index then
    return {0, index}
end
if reserved > index then
    return {1, reserved}
end
if reserved >= 0 then
    local lapsed = prefix .. ":lapsed"
    redis.call("incr", lapsed)
    redis.call("pexpire", lapsed, 86400000)
end

local function take(i)
    local key = prefix .. ":" .. i
    local count = redis.call("incr", key)
    if count == 1 then
        redis.call("pexpire", key, (i - index + 2) * period)
    end
    if count > limit then
        redis.call("decr", key)
        return false
    end
    return true
end

if take(index) then
    return {0, index}
end
-- The first window that may still have room; skips the full ones a previous call saw.
local cursor = prefix .. ":next"
local start = math.max(index + 1, tonumber(redis.call("get", cursor) or 0))
for i = start, index + max_ahead do
    if take(i) then
        redis.call("set", cursor, i, "PX", (i - index + 2) * period)
        return {1, i}
    end
end
return {2, index + 1}
