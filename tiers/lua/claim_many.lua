-- Claim a fetched batch of main-queue messages in one step, when the consumer fetches it
-- (claim.lua's verdicts). A message with a group takes (or keeps) its group slot here, leased
-- for lease_ms: the worker holding it keeps that lease fresh until the run settles, as it
-- does for a running job. When the group is full and the job holds no slot (its slot was
-- reaped), the message is parked from its copy in the queue's message hash and acked to
-- Dramatiq in the same step (the worker drops it: when the slot frees, the same redis id
-- comes back to the queue, where no ack of the old delivery may touch it).
-- ARGV: now_ms, lease_ms, queue, worker_id, then per message: job_id, message_id, redis_id,
--       group_key, cap
-- Returns one verdict per message: run | stale | done | parked | later (claim it at start).
local now, lease, queue, worker_id = tonumber(ARGV[1]), tonumber(ARGV[2]), ARGV[3], ARGV[4]
local messages = ns .. ":" .. queue .. ".msgs"
local acks = ns .. ":__acks__." .. worker_id .. "." .. queue
local verdicts = {}
for i = 5, #ARGV, 5 do
    local job_id, message_id, redis_id = ARGV[i], ARGV[i + 1], ARGV[i + 2]
    local gk, cap = ARGV[i + 3], tonumber(ARGV[i + 4])
    local record = ns .. ":job:" .. job_id
    local current = redis.call("hmget", record, "state", "msg", "cur")
    local state, current_msg, current_redis = current[1], current[2], current[3]
    local verdict = "run"
    if state then
        if current_msg ~= message_id or current_redis ~= redis_id then
            verdict = "stale"
        elseif state ~= "waiting" and state ~= "parked" and state ~= "delayed"
            and state ~= "active" then
            verdict = "done"
        end
    end
    if verdict == "run" and gk ~= "" then
        local group = ns .. ":group:" .. gk
        if not redis.call("zscore", group, job_id) and redis.call("zcard", group) >= cap then
            local data = redis.call("hget", messages, redis_id)
            if data and redis.call("srem", acks, redis_id) > 0 then
                redis.call("hdel", messages, redis_id)
                park(gk, redis_id, data)
                redis.call("hset", record, "state", "parked")
                verdict = "parked"
            else
                verdict = "later"
            end
        else
            admit(gk, job_id, now + lease)
        end
    end
    if verdict == "run" then
        if not state then
            redis.call("hset", record, "msg", message_id, "cur", redis_id, "created_at", now,
                "group", gk, "failures", 0)
        end
        redis.call("hset", record, "state", "active", "started_at", now)
    end
    verdicts[#verdicts + 1] = verdict
end
return verdicts
