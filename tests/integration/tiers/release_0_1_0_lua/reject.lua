-- Dead-letter fetched messages no worker can run (undecodable, unknown actor, no job id) and
-- fail their jobs, so neither the message nor its id comes back.
-- ARGV: queue, worker_id, now_ms, retention_ms, then per message: redis_id, job_id ("" when
--       unknown), reason
-- Returns how many messages were dead-lettered.
local queue, worker_id, now, retention = ARGV[1], ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4])
local canonical = queue
if string.sub(queue, -3) == ".DQ" then
    canonical = string.sub(queue, 1, -4)
end
local acks = ns .. ":__acks__." .. worker_id .. "." .. queue
local messages = ns .. ":" .. queue .. ".msgs"
local xq = ns .. ":" .. canonical .. ".XQ"
local rejected = 0
for i = 5, #ARGV, 3 do
    local redis_id, job_id, reason = ARGV[i], ARGV[i + 1], ARGV[i + 2]
    if redis.call("srem", acks, redis_id) > 0 then
        local data = redis.call("hget", messages, redis_id)
        if data then
            redis.call("zadd", xq, now, redis_id)
            redis.call("hset", xq .. ".msgs", redis_id, data)
            redis.call("hdel", messages, redis_id)
        end
        rejected = rejected + 1
        if job_id ~= "" then
            local record = ns .. ":job:" .. job_id
            local current = redis.call("hmget", record, "state", "cur")
            if current[2] == redis_id then
                redis.call("hset", record, "state", "failed", "last_error", reason,
                    "finished_at", now)
                redis.call("pexpire", record, retention)
            end
        end
    end
end
return rejected
