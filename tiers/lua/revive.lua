-- An operator retries a failed job: its dead-lettered message goes back to its queue (or its
-- group's parked list) as a new message, in one step with the record, so the id stays one
-- job and a second retry (or a retry racing an enqueue) cannot run it twice.
-- ARGV: job_id, failed_redis_id (the record's cur the operator saw), xq (dead-letter zset),
--       message_id, redis_id, data (the new message), queue, group_key, cap, now_ms,
--       queued_lease_ms, operator
-- Returns the job's new state (waiting | parked), or not_failed | changed | gone.
-- The runs that died before (start.lua's unsettled, open) are forgotten with the attempts: a
-- job failed as worker_died runs again (an older version of this script keeps them, and the
-- job fails again at its next start).
local job_id, failed_id, xq = ARGV[1], ARGV[2], ARGV[3]
local message_id, redis_id, data, queue = ARGV[4], ARGV[5], ARGV[6], ARGV[7]
local gk, cap, now, queued_lease = ARGV[8], tonumber(ARGV[9]), tonumber(ARGV[10]), tonumber(ARGV[11])
local operator = ARGV[12]

local record = ns .. ":job:" .. job_id
local current = redis.call("hmget", record, "state", "cur")
if current[1] ~= "failed" then
    return "not_failed"
end
if current[2] ~= failed_id then
    return "changed"
end
if redis.call("zrem", xq, failed_id) == 0 then
    return "gone"
end
redis.call("hdel", xq .. ".msgs", failed_id)
local new_state = place(queue, redis_id, data, gk, cap, job_id, now, queued_lease)
redis.call("persist", record)
redis.call("hdel", record, "finished_at", "started_at", "discarded_by", "discarded_at",
    "unsettled", "open")
redis.call("hset", record, "state", new_state, "msg", message_id, "cur", redis_id,
    "queue", queue, "failures", 0, "retried_by", operator, "retried_at", now)
return new_state
