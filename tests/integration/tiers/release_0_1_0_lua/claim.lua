-- A worker is about to run a message: drop stale or finished copies, take the group slot.
-- ARGV: job_id, message_id, redis_id, group_key, cap, now_ms, lease_ms, data (main-queue
--       form), its main queue, the worker's id
-- Returns run | stale | done | parked. A message parked here is acked in the same step (out
-- of the worker's ack set, its queue's copy dropped), as a fetch-time park does, so the
-- worker's own ack that follows the verdict is a no-op: it cannot drop the queue's copy of
-- the message once a release has queued it again (Dramatiq's ack deletes the message's data
-- whenever the id is still in the worker's ack set).
local job_id, message_id, redis_id, gk = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local cap, now, lease, data = tonumber(ARGV[5]), tonumber(ARGV[6]), tonumber(ARGV[7]), ARGV[8]
local queue, worker_id = ARGV[9], ARGV[10]

return claim(job_id, message_id, redis_id, gk, cap, now, lease, function()
    if redis.call("srem", ns .. ":__acks__." .. worker_id .. "." .. queue, redis_id) > 0 then
        redis.call("hdel", ns .. ":" .. queue .. ".msgs", redis_id)
    end
    park(gk, redis_id, data)
    return true
end)
