-- Register a job id and put its message on the broker in one atomic step.
-- ARGV: job_id, message_id, redis_id, data, queue, group_key ("" = none), cap, now_ms,
--       keep_finished ("1"/"0"), organization_id, family, queued_lease_ms,
--       previous_redis_id (the copy this one replaces when a message moves along; "" = none),
--       guard window key prefix ("" or absent = no guard), guard limit, guard period_ms
-- Returns {outcome, current message id}; outcome is added | replaced | deduplicated | moved;
-- or {"guarded", end of the guard's window (ms)} when the guard's current window (a
-- tiers.rate_window fixed window: <prefix>:<now_ms // period_ms>) has counted its limit:
-- then nothing is read or written but that counter, which is read, never counted. The guard
-- is checked before anything else, so a guarded call answers the same whatever the job id
-- and its record; the calls of one transaction all see the same counter.
local job_id, message_id, redis_id, data, queue = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5]
local gk, cap, now = ARGV[6], tonumber(ARGV[7]), tonumber(ARGV[8])
local keep, org, family, queued_lease = ARGV[9], ARGV[10], ARGV[11], tonumber(ARGV[12])
local previous = ARGV[13]
local guard = ARGV[14]

if guard and guard ~= "" then
    local period = tonumber(ARGV[16])
    local index = math.floor(now / period)
    local used = tonumber(redis.call("get", guard .. ":" .. index) or "0")
    if used >= tonumber(ARGV[15]) then
        return {"guarded", (index + 1) * period}
    end
end

local record = ns .. ":job:" .. job_id
local current = redis.call("hmget", record, "state", "msg", "cur")
local state, current_msg, current_redis = current[1], current[2], current[3]
local live = state == "waiting" or state == "parked" or state == "delayed" or state == "active"

local outcome
if current_msg and current_msg == message_id then
    -- The same message moving along (a delayed copy promoted): only the copy the record
    -- points at may move, and only while the job is live. A copy redelivered after its move
    -- already happened (or after the job finished) must not bring the job back.
    if not live or previous == "" or current_redis ~= previous then
        return {"deduplicated", current_msg}
    end
    outcome = "moved"
elseif state then
    if live or keep == "1" then
        return {"deduplicated", current_msg}
    end
    outcome = "replaced"
else
    outcome = "added"
end

local new_state = place(queue, redis_id, data, gk, cap, job_id, now, queued_lease)
if outcome == "moved" then
    redis.call("hset", record, "state", new_state, "cur", redis_id, "queue", queue)
else
    redis.call("del", record)
    redis.call("hset", record, "state", new_state, "msg", message_id, "cur", redis_id,
        "queue", queue, "org", org, "family", family, "group", gk,
        "created_at", now, "attempts", 0, "failures", 0)
end
return {outcome, message_id}
