-- A worker is about to run a message: drop stale or finished copies, take the group slot.
-- ARGV: job_id, message_id, redis_id, group_key, cap, now_ms, lease_ms, data (main-queue form)
-- Returns run | stale | done | parked.
local job_id, message_id, redis_id, gk = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local cap, now, lease, data = tonumber(ARGV[5]), tonumber(ARGV[6]), tonumber(ARGV[7]), ARGV[8]

local record = ns .. ":job:" .. job_id
local current = redis.call("hmget", record, "state", "msg", "cur")
local state, current_msg, current_redis = current[1], current[2], current[3]
if state then
    if current_msg ~= message_id or current_redis ~= redis_id then
        return "stale"
    end
    if state ~= "waiting" and state ~= "parked" and state ~= "delayed" and state ~= "active" then
        return "done"
    end
end

if gk ~= "" then
    local group = ns .. ":group:" .. gk
    if not redis.call("zscore", group, job_id) and redis.call("zcard", group) >= cap then
        park(gk, redis_id, data)
        redis.call("hset", record, "state", "parked")
        return "parked"
    end
    admit(gk, job_id, now + lease)
end

if not state then
    redis.call("hset", record, "msg", message_id, "cur", redis_id, "created_at", now,
        "group", gk, "failures", 0)
end
redis.call("hset", record, "state", "active", "started_at", now)
return "run"
