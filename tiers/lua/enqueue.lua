-- Register a job id and put its message on the broker in one atomic step.
-- ARGV: job_id, message_id, redis_id, data, queue, group_key ("" = none), cap, now_ms,
--       keep_finished ("1"/"0"), organization_id, family, queued_lease_ms
-- Returns {outcome, current message id}; outcome is added | replaced | deduplicated | moved.
local job_id, message_id, redis_id, data, queue = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5]
local gk, cap, now = ARGV[6], tonumber(ARGV[7]), tonumber(ARGV[8])
local keep, org, family, queued_lease = ARGV[9], ARGV[10], ARGV[11], tonumber(ARGV[12])

local record = ns .. ":job:" .. job_id
local current = redis.call("hmget", record, "state", "msg")
local state, current_msg = current[1], current[2]

local outcome
if current_msg and current_msg == message_id then
    -- The same message moving along (retry, delay, promotion): not a new request.
    outcome = "moved"
elseif state then
    if state == "waiting" or state == "parked" or state == "delayed" or state == "active" then
        return {"deduplicated", current_msg}
    end
    if keep == "1" then
        return {"deduplicated", current_msg}
    end
    outcome = "replaced"
else
    outcome = "added"
end

local new_state
if string.sub(queue, -3) == ".DQ" then
    new_state = "delayed"
    push(queue, redis_id, data)
elseif gk ~= "" then
    local group = ns .. ":group:" .. gk
    if redis.call("zscore", group, job_id) or redis.call("zcard", group) < cap then
        admit(gk, job_id, now + queued_lease)
        push(queue, redis_id, data)
        new_state = "waiting"
    else
        park(gk, redis_id, data)
        new_state = "parked"
    end
else
    push(queue, redis_id, data)
    new_state = "waiting"
end

if outcome == "moved" then
    redis.call("hset", record, "state", new_state, "cur", redis_id, "queue", queue)
else
    redis.call("del", record)
    redis.call("hset", record, "state", new_state, "msg", message_id, "cur", redis_id,
        "queue", queue, "org", org, "family", family, "group", gk,
        "created_at", now, "attempts", 0, "failures", 0)
end
return {outcome, message_id}
