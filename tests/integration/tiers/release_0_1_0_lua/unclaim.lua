-- Undo the fetch-time claim of messages handed back unrun (worker shutdown): the job waits
-- again and the start that did not happen is not counted; a grouped job keeps its slot with
-- the lease of a queued job (its message is back in the queue, where no worker refreshes it).
-- ARGV: now_ms, queued_lease_ms, then triples of job_id, redis_id, group_key.
-- Returns how many records were set back.
local now, queued_lease = tonumber(ARGV[1]), tonumber(ARGV[2])
local undone = 0
for i = 3, #ARGV, 3 do
    local job_id, redis_id, gk = ARGV[i], ARGV[i + 1], ARGV[i + 2]
    local record = ns .. ":job:" .. job_id
    local current = redis.call("hmget", record, "state", "cur")
    if current[1] == "active" and current[2] == redis_id then
        redis.call("hset", record, "state", "waiting")
        if gk ~= "" then
            redis.call("zadd", ns .. ":group:" .. gk, "XX", now + queued_lease, job_id)
        end
        undone = undone + 1
    end
end
return undone
