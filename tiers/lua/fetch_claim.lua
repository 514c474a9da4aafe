-- Fetch up to count messages of a main queue and claim them, in one step: Dramatiq's fetch
-- (dispatch.lua's "fetch": this worker's heartbeat, the ids popped into its ack set, their
-- data; popped here from the queue's list, then from its fair order, _fair.lua) and the
-- claim (claim_fetched, _slots.lua) of each fetched message this worker can run, read from
-- the message itself. A message is claimed here only when it is a whole
-- Dramatiq message (its seven fields and no other) of one of this worker's actors, carrying
-- its own redis id and a job id, and not delayed; any other gets the verdict "" and the
-- worker screens it as before (dead-letters it, or claims it when a thread starts it).
-- ARGV: now_ms, lease_ms, queue, worker_id, count, then the actor names this worker runs
-- Returns {data per message, verdict per message (run | stale | done | parked | later, as
-- claim_fetched's; rerun: a run whose job has an earlier run that never settled, or that
-- was left active by the worker that fetched it before; or ""), how
-- many messages the queue still holds, the redis id each message was fetched under (a
-- message is acked or dead-lettered under that id, whatever id its data carries)}.
-- A delay queue's messages (they carry an eta) are fetched here too, never claimed.
local now, lease, queue, worker_id = tonumber(ARGV[1]), tonumber(ARGV[2]), ARGV[3], ARGV[4]
local count = tonumber(ARGV[5])
redis.call("zadd", ns .. ":__heartbeats__", ARGV[1], worker_id)
local queue_key = ns .. ":" .. queue
local messages = queue_key .. ".msgs"
local acks = ns .. ":__acks__." .. worker_id .. "." .. queue
-- The list first (ungrouped messages; messages handed back or returned from dead workers),
-- then the fair order of admitted grouped messages (_fair.lua).
local ids = redis.call("lpop", queue_key, count) or {}
if #ids < count then
    for _, redis_id in ipairs(fair_pop(queue, count - #ids)) do
        ids[#ids + 1] = redis_id
    end
end
if #ids == 0 then
    return {{}, {}, 0, {}}
end
redis.call("sadd", acks, unpack(ids))
local datas = redis.call("hmget", messages, unpack(ids))

local actors = {}
for i = 6, #ARGV do
    actors[ARGV[i]] = true
end
local fields = {queue_name = true, actor_name = true, args = true, kwargs = true,
    options = true, message_id = true, message_timestamp = true}

local function claimable(message, redis_id)
    if type(message) ~= "table" or not actors[message["actor_name"]] then
        return nil
    end
    local seen = 0
    for key, _ in pairs(message) do
        if not fields[key] then
            return nil
        end
        seen = seen + 1
    end
    local options = message["options"]
    if seen ~= 7 or type(options) ~= "table" or type(message["message_id"]) ~= "string" then
        return nil
    end
    local job_id = options["st_job"]
    if options["redis_message_id"] ~= redis_id or type(job_id) ~= "string" or job_id == ""
        or options["eta"] ~= nil then
        return nil
    end
    return options
end

local verdicts = {}
for i, redis_id in ipairs(ids) do
    local verdict = ""
    local data = datas[i]
    if data then
        local decoded, message = pcall(cjson.decode, data)
        local options = decoded and claimable(message, redis_id)
        if options then
            local gk = options["st_group"]
            if type(gk) ~= "string" then
                gk = ""
            end
            -- One read of the record serves the claim and the rerun check.
            local before = redis.call("hmget", ns .. ":job:" .. options["st_job"], "state",
                "msg", "cur", "open")
            verdict = claim_fetched(options["st_job"], message["message_id"], redis_id, gk,
                tonumber(options["st_cap"]) or 0, now, lease, messages, acks, before)
            if verdict == "run" and (before[1] == "active" or before[4]) then
                -- An earlier run never settled, or the worker that fetched this delivery
                -- died (perhaps mid-run, before its start reached Redis): this start waits
                -- for start.lua's verdict.
                verdict = "rerun"
            end
        end
    end
    verdicts[i] = verdict
end
return {datas, verdicts, redis.call("llen", queue_key) + redis.call("zcard", queue_key .. ".fq"),
    ids}
