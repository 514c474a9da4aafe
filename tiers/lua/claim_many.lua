-- Claim a fetched batch of messages WITHOUT a group in one step, when the consumer fetches it
-- (claim.lua's verdicts; with no group there is no slot to take, so nothing to park).
-- ARGV: now_ms, then per message: job_id, message_id, redis_id
-- Returns one verdict per message: run | stale | done.
local now = tonumber(ARGV[1])
local verdicts = {}
for i = 2, #ARGV, 3 do
    local job_id, message_id, redis_id = ARGV[i], ARGV[i + 1], ARGV[i + 2]
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
    if verdict == "run" then
        if not state then
            redis.call("hset", record, "msg", message_id, "cur", redis_id, "created_at", now,
                "group", "", "failures", 0)
        end
        redis.call("hset", record, "state", "active", "started_at", now)
    end
    verdicts[#verdicts + 1] = verdict
end
return verdicts
