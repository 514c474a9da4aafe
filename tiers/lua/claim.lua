-- A worker is about to run a message: drop stale or finished copies, take the group slot.
-- ARGV: job_id, message_id, redis_id, group_key, cap, now_ms, lease_ms, data (main-queue
--       form), its main queue
-- Returns run | stale | done | parked.
local job_id, message_id, redis_id, gk = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local cap, now, lease, data = tonumber(ARGV[5]), tonumber(ARGV[6]), tonumber(ARGV[7]), ARGV[8]
local queue = ARGV[9]

return claim(job_id, message_id, redis_id, gk, cap, now, lease, function()
    park_apart(gk, redis_id, data, queue, job_id)
    return true
end)
