-- Move a due delayed message to its queue and acknowledge its delay-queue copy, in one step.
-- (Dramatiq does this in two: enqueue the new copy, then ack the old one. A worker dying
-- between the two left the old copy to be redelivered and moved again after the job had run.)
-- ARGV: delay_queue, worker_id, now_ms, job_id, message_id, delayed_redis_id, new_redis_id,
--       data (main-queue form), queue, group_key, cap, queued_lease_ms
-- Returns moved | gone (no longer this worker's) | stale (superseded) | done (job finished).
local dq, worker_id, now = ARGV[1], ARGV[2], tonumber(ARGV[3])
local job_id, message_id, delayed_id, new_id = ARGV[4], ARGV[5], ARGV[6], ARGV[7]
local data, queue, gk, cap = ARGV[8], ARGV[9], ARGV[10], tonumber(ARGV[11])
local queued_lease = tonumber(ARGV[12])

redis.call("zadd", ns .. ":__heartbeats__", now, worker_id)
local record = ns .. ":job:" .. job_id
local current = redis.call("hmget", record, "state", "msg", "cur")
local state, current_msg, current_redis = current[1], current[2], current[3]
if redis.call("srem", ns .. ":__acks__." .. worker_id .. "." .. dq, delayed_id) == 0 then
    -- Not this worker's any more: a peer took its messages back (this worker looked dead)
    -- and the copy is back in the delay queue. Unless Redis lost its data (no record either):
    -- then the copy in this worker's memory is the only one left, and it runs.
    if state then
        return "gone"
    end
end
redis.call("hdel", ns .. ":" .. dq .. ".msgs", delayed_id)

if state then
    if current_msg ~= message_id or current_redis ~= delayed_id then
        return "stale"
    end
    if state ~= "waiting" and state ~= "parked" and state ~= "delayed" and state ~= "active" then
        return "done"
    end
end

local new_state = place(queue, new_id, data, gk, cap, job_id, now, queued_lease)
if state then
    redis.call("hset", record, "state", new_state, "cur", new_id, "queue", queue)
else
    -- The record is gone (Redis lost data): run the job rather than lose it.
    redis.call("hset", record, "state", new_state, "msg", message_id, "cur", new_id,
        "queue", queue, "group", gk, "created_at", now, "attempts", 0, "failures", 0)
end
return "moved"
