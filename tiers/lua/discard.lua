-- An operator discards a failed job: its dead-lettered message is dropped, its record stays
-- failed (until its retention ends) and says who discarded it and when.
-- ARGV: job_id, failed_redis_id (the record's cur the operator saw), xq, now_ms, operator
-- Returns discarded | not_failed | changed | gone.
local job_id, failed_id, xq, now, operator = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5]

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
redis.call("hset", record, "discarded_by", operator, "discarded_at", now)
return "discarded"
