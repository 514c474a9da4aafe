-- Undo the fetch-time claim of messages handed back unrun (worker shutdown): the job waits
-- again and the start that did not happen is not counted.
-- ARGV: pairs of job_id, redis_id. Returns how many records were set back.
local undone = 0
for i = 1, #ARGV, 2 do
    local record = ns .. ":job:" .. ARGV[i]
    local current = redis.call("hmget", record, "state", "cur")
    if current[1] == "active" and current[2] == ARGV[i + 1] then
        redis.call("hset", record, "state", "waiting")
        undone = undone + 1
    end
end
return undone
