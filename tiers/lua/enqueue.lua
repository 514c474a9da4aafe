-- Register a job id and put its message on the broker in one atomic step.
-- ARGV: job_id, message_id, redis_id, data, queue, group_key ("" = none), cap, now_ms,
--       keep_finished ("1"/"0"), organization_id, family, queued_lease_ms,
--       previous_redis_id (the copy this one replaces when a message moves along; "" = none)
-- Returns {outcome, current message id}; outcome is added | replaced | deduplicated | moved.
local job_id, message_id, redis_id, data, queue = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5]
local gk, cap, now = ARGV[6], tonumber(ARGV[7]), tonumber(ARGV[8])
local keep, org, family, queued_lease = ARGV[9], ARGV[10], ARGV[11], tonumber(ARGV[12])
local previous = ARGV[13]

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
