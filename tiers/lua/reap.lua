-- Give back slots whose lease ran out (their worker died) to parked messages.
-- ARGV: max_groups, queued_lease_ms. Returns the number of slots reaped.
-- A lease has run out by Redis's clock, not the caller's: every worker runs this, and one
-- whose host clock ran ahead would otherwise take the slots of jobs still running elsewhere
-- (a lease is written from its holder's clock, which the start check keeps within
-- SPEEDTIER_MAX_CLOCK_OFFSET_SECONDS of Redis's: shared/clock_offset.py).
local time = redis.call("time")
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
local max_groups, queued_lease = tonumber(ARGV[1]), tonumber(ARGV[2])
local index = ns .. ":__leases__"
local reaped = 0
local groups = redis.call("zrangebyscore", index, "-inf", now, "LIMIT", 0, max_groups)
for _, gk in ipairs(groups) do
    local group = ns .. ":group:" .. gk
    local expired = redis.call("zrangebyscore", group, "-inf", now)
    for _, job_id in ipairs(expired) do
        reaped = reaped + release(gk, job_id, now, queued_lease)
    end
    local first = redis.call("zrange", group, 0, 0, "WITHSCORES")
    if first[2] then
        redis.call("zadd", index, first[2], gk)
    else
        redis.call("zrem", index, gk)
    end
end
return reaped
