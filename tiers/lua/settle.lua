-- Record how a run ended and free its group slot (passing it to a parked message).
-- ARGV: job_id, redis_id, group_key, state, now_ms, retention_ms, error, failures,
--       next_redis_id, next_data, next_queue, queued_lease_ms, delay (why it was delayed),
--       ack_queue, worker_id ("" = the caller acks the delivered message itself),
--       rates_key ("" = not counted), rates_keep_seconds, epoch (the run's fencing token from
--       start.lua; "" or "0" = unfenced; "s:<start_id>" for a run started before start.lua
--       answered: the record's open start must be that one), then the rates fields to count
-- With next_redis_id set, the job goes back to the broker (retry or delay) in the same step.
-- With ack_queue set, Dramatiq's ack of the delivered message is done here too (dispatch.lua's
-- "ack": drop it from the worker's ack set and the queue's message hash; heartbeat).
-- The run is counted in the minute's rates hash (tiers/run_rates.py), stale or not: it ran.
-- A run whose epoch is not the record's (a later run of the same delivery started elsewhere:
-- this worker stalled past its heartbeat timeout) is refused as "stale", as is a run of a
-- superseded message; a record without an epoch (written by older scripts) fences nothing.
-- An accepted settle clears the record's "open" mark (start.lua: the run did not die), and a
-- grouped run's measured time is charged to its group in the queue's fair order.
-- Returns "stale" (the record points at another message: slot and state left alone),
-- "released" (recorded, and the freed group slot passed to a parked message of the same
-- queue) or "ok".
local job_id, redis_id, gk, state = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local now, retention, err, failures = tonumber(ARGV[5]), tonumber(ARGV[6]), ARGV[7], ARGV[8]
local next_redis_id, next_data, next_queue = ARGV[9], ARGV[10], ARGV[11]
local queued_lease = tonumber(ARGV[12])
local delay = ARGV[13]
local ack_queue, worker_id = ARGV[14], ARGV[15]
local rates_key, rates_keep, epoch = ARGV[16], ARGV[17], ARGV[18]

if ack_queue ~= "" then
    -- The heartbeat is this script's first write, and one Redis refuses when it is out of
    -- memory under noeviction: a full Redis then refuses the whole settle, which the settle
    -- sender sends again once it has room, rather than let the script run past maxmemory (a
    -- script that has written once may write on). The worker's look writes it anyway.
    redis.call("zadd", ns .. ":__heartbeats__", ARGV[5], worker_id)
    if redis.call("srem", ns .. ":__acks__." .. worker_id .. "." .. ack_queue, redis_id) > 0 then
        redis.call("hdel", ns .. ":" .. ack_queue .. ".msgs", redis_id)
    end
end

if rates_key and rates_key ~= "" then
    -- A minute's hash is created by the first count of one of its fields: its expiry is set
    -- then (a count of 1), not again at every run.
    for i = 19, #ARGV do
        if redis.call("hincrby", rates_key, ARGV[i], 1) == 1 then
            redis.call("expire", rates_key, rates_keep)
        end
    end
end

local record = ns .. ":job:" .. job_id
local current = redis.call("hmget", record, "cur", "epoch", "queue", "started_at", "state",
    "open", "attempts")
if current[1] and current[1] ~= redis_id then
    return "stale"
end
if string.sub(epoch, 1, 2) == "s:" then
    -- A run started while its start was on its way (start.lua, sent ahead of this settle):
    -- it holds the job only if that start is the job's open one.
    if current[5] and current[6] ~= string.sub(epoch, 3) then
        return "stale"
    end
elseif current[2] and epoch ~= "" and epoch ~= "0" and current[2] ~= epoch then
    return "stale"
end
redis.call("hdel", record, "open")
local released = false
if gk ~= "" then
    if current[3] then
        -- The run's measured time is charged to its group (the fair order, _fair.lua),
        -- before the release admits the group's next job.
        fair_settle(current[3], gk, tonumber(current[4]), now)
    end
    local _, pushed = release(gk, job_id, now, queued_lease)
    released = pushed or false
    fair_flush()
end
-- attempts counts runs that ended here; a fetched message that never started is not one.
-- The record's fields are written in one command (this script reads and writes them alone).
local fields = {"attempts", (tonumber(current[7]) or 0) + 1, "failures", failures}
if err ~= "" then
    fields[#fields + 1], fields[#fields + 2] = "last_error", err
end
if delay ~= "" then
    fields[#fields + 1], fields[#fields + 2] = "last_delay", delay
end
if next_redis_id ~= "" then
    push(next_queue, next_redis_id, next_data)
    redis.call("hset", record, "state", "delayed", "cur", next_redis_id, "queue", next_queue,
        unpack(fields))
else
    redis.call("hset", record, "state", state, "finished_at", now, unpack(fields))
    redis.call("pexpire", record, retention)
end
-- "released": the freed slot went to a parked message, now in the queue (the settling
-- worker wakes its consumer of that queue rather than let it sleep out a poll).
if released then
    return "released"
end
return "ok"
