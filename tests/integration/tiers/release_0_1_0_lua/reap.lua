-- Give back slots whose lease ran out (their worker died) to parked messages.
-- ARGV: now_ms, max_groups, queued_lease_ms. Returns the number of slots reaped.
local now, max_groups, queued_lease = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
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
