-- A claimed run is about to start: check that its delivery is still this worker's, count the
-- start, and give the run its fencing token; or end a job whose runs keep dying.
-- ARGV: job_id, message_id, redis_id, queue (the main queue it was fetched from), worker_id,
--       now_ms, max_unsettled (runs that ended without a settle before the job fails),
--       retention_ms (how long a failed record is kept), queued_lease_ms, alone ("1": the
--       worker runs nothing else meanwhile), start_id (unique to this start; a call sent
--       again after its reply was lost carries the same one)
-- Returns {verdict, token}:
--   run          the run starts; token is its epoch, which its settle must carry
--   lost         the delivery is no longer this worker's (its redis id left the worker's ack
--                set: a peer took it back while this worker looked dead): not run, not acked
--   stale, done  superseded copy, or a finished job (as claim.lua)
--   suspect      an earlier run of the job died (token: how many): not started; the worker
--                starts it again with alone = "1" once it runs nothing else, so that a crash
--                it causes is counted against it, not against runs beside it
--   worker_died  max_unsettled runs of the job started and never settled (each killed its
--                worker, or was taken back from a stalled one): the job is failed and this
--                message dead-lettered, its group slot released; token is that count
-- Record fields (absent in records written by older scripts, read as 0 / unset):
--   epoch     runs started (the fencing token of the latest); a settle carrying another one
--             is refused (settle.lua)
--   open      the start_id of a started run not settled yet; found set here by another
--             start, that run died (found with this call's own start_id: this very start,
--             sent again, which answers as it did)
--   unsettled runs that died so far
-- Invariants: a run starts only while its redis id is in this worker's ack set of its queue
-- and the record points at this message; every start moves epoch on, so two runs of one job
-- never hold the same token; a job whose record is gone (Redis lost its data) runs unfenced
-- (token 0) rather than be lost.
local job_id, message_id, redis_id, queue = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local worker_id, now, max_unsettled = ARGV[5], tonumber(ARGV[6]), tonumber(ARGV[7])
local retention, queued_lease, alone = tonumber(ARGV[8]), tonumber(ARGV[9]), ARGV[10]
local start_id = ARGV[11]

local record = ns .. ":job:" .. job_id
local f = redis.call("hmget", record, "state", "msg", "cur", "open", "unsettled", "group",
    "epoch")
local state, open = f[1], f[4]
if not state then
    return {"run", "0"}
end
if f[2] ~= message_id or f[3] ~= redis_id then
    return {"stale", "0"}
end
if state ~= "waiting" and state ~= "parked" and state ~= "delayed" and state ~= "active" then
    return {"done", "0"}
end
local acks = ns .. ":__acks__." .. worker_id .. "." .. queue
if redis.call("sismember", acks, redis_id) == 0 then
    return {"lost", "0"}
end

if open == start_id then
    return {"run", f[7]}
end
local unsettled = tonumber(f[5]) or 0
if open then
    unsettled = unsettled + 1
    redis.call("hset", record, "unsettled", unsettled)
end
if unsettled >= max_unsettled then
    -- Dead-letter this delivery (Dramatiq's nack) and fail the job, in this step.
    redis.call("srem", acks, redis_id)
    local messages = ns .. ":" .. queue .. ".msgs"
    local data = redis.call("hget", messages, redis_id)
    if data then
        local xq = ns .. ":" .. queue .. ".XQ"
        redis.call("zadd", xq, now, redis_id)
        redis.call("hset", xq .. ".msgs", redis_id, data)
        redis.call("hdel", messages, redis_id)
    end
    local gk = f[6]
    if gk and gk ~= "" then
        release(gk, job_id, now, queued_lease)
    end
    redis.call("hdel", record, "open")
    redis.call("hset", record, "state", "failed", "finished_at", now, "last_error",
        "worker_died: " .. unsettled .. " run(s) ended without a settle (the worker died or "
        .. "stalled)")
    redis.call("pexpire", record, retention)
    return {"worker_died", tostring(unsettled)}
end

if unsettled > 0 and alone ~= "1" then
    -- This death is counted (open cleared): the call with alone = "1" does not count it again.
    redis.call("hdel", record, "open")
    return {"suspect", tostring(unsettled)}
end

-- One write: the script runs alone, so the epoch read above is still the record's.
local epoch = (tonumber(f[7]) or 0) + 1
redis.call("hset", record, "epoch", epoch, "open", start_id, "started_at", now)
return {"run", tostring(epoch)}
