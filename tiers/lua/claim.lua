-- A worker is about to run a message: drop stale or finished copies, take the group slot.
-- ARGV: job_id, message_id, redis_id, group_key, cap, now_ms, lease_ms, data (main-queue
--       form), its main queue, the worker's id
-- Returns run | stale | done | parked. A message parked here is parked in place: its data
-- (re)stored in its queue's hash, and its delivery taken out of the worker's ack set in the
-- same step, so the worker's ack that follows the verdict cannot drop the copy a release
-- may have queued meanwhile.
local job_id, message_id, redis_id, gk = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local cap, now, lease, data = tonumber(ARGV[5]), tonumber(ARGV[6]), tonumber(ARGV[7]), ARGV[8]
local queue, worker_id = ARGV[9], ARGV[10]

return claim(job_id, message_id, redis_id, gk, cap, now, lease, function()
    redis.call("srem", ns .. ":__acks__." .. worker_id .. "." .. queue, redis_id)
    redis.call("hset", ns .. ":" .. queue .. ".msgs", redis_id, data)
    park(gk, redis_id, queue, job_id)
    return true
end)
