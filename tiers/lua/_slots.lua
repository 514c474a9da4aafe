-- Group slots: where a message waits (its queue, in the fair order, or its group's parked
-- list), a freed slot handed to the oldest parked message, and the claim of a fetched or
-- starting message. Sent after _prelude.lua and _fair.lua (tiers/lua_scripts.py).
-- Invariants: a group's zset never holds more than its cap of jobs (place and claim check
-- the cap before admitting; release hands a freed slot to one parked message, never more);
-- a parked message is in its group's parked list and nowhere else; an admitted grouped
-- message waits in its queue's fair order (or in the list, put back there by Dramatiq),
-- or is in one worker's ack set; parked messages leave their list oldest first.
-- Per script call: a fetch's claims all lease until the same now + lease, so each group's
-- __leases__ entry is brought down once per call (_prelude.lua's rule: at or below the
-- group's earliest deadline); a release reads the parked message's job id and queue from its
-- text when each key occurs once with a plain string value, and decodes it otherwise.

-- Put a message where its job now waits: a delay queue, its queue (a grouped one, taking a
-- group slot when the group has room, in the fair order), or the group's parked list.
-- Returns the job's new state.
local function place(queue, redis_id, data, gk, cap, job_id, now, queued_lease)
    if string.sub(queue, -3) == ".DQ" then
        push(queue, redis_id, data)
        return "delayed"
    end
    if gk == "" then
        push(queue, redis_id, data)
        return "waiting"
    end
    local group = ns .. ":group:" .. gk
    local held = redis.call("zscore", group, job_id)
    local others = redis.call("zcard", group)
    if held then
        others = others - 1
    end
    if others == 1 and redis.call("llen", group .. ":parked") == 0 then
        -- The group takes a second job: its first one is no longer a sparse group's.
        for _, other in ipairs(redis.call("zrange", group, 0, 1)) do
            if other ~= job_id then
                fair_demote(queue, other)
            end
        end
    end
    if not held and others >= cap then
        park(gk, redis_id, data)
        return "parked"
    end
    admit(gk, job_id, now + queued_lease)
    fair_push(queue, redis_id, data, gk, others == 0)
    return "waiting"
end

-- The string value of key name in an encoded message, found without decoding it: only when
-- the key occurs once (as a key: a string's quotes are escaped) and its value is a string
-- without escapes; otherwise nil, and the caller decodes the message.
local function message_text(data, name)
    local key = '"' .. name .. '":"'
    local _, last = string.find(data, key, 1, true)
    if not last or string.find(data, key, last + 1, true) then
        return nil
    end
    local stop = string.find(data, '"', last + 1, true)
    if not stop then
        return nil
    end
    local value = string.sub(data, last + 1, stop - 1)
    if string.find(value, "\\", 1, true) then
        return nil
    end
    return value
end

-- Free job_id's slot in group gk; if it held one, pass it to the oldest parked message.
-- Returns 1 when a slot was freed (0 otherwise), and true as a second value when a parked
-- message was put in its queue's fair order with it.
local function release(gk, job_id, now, queued_lease)
    local group = ns .. ":group:" .. gk
    if redis.call("zrem", group, job_id) == 0 then
        return 0
    end
    local parked = group .. ":parked"
    while true do
        local redis_id = redis.call("lpop", parked)
        if not redis_id then
            return 1
        end
        local data = redis.call("hget", parked .. ".msgs", redis_id)
        redis.call("hdel", parked .. ".msgs", redis_id)
        if data then
            local next_job, next_queue = message_text(data, "st_job"),
                message_text(data, "queue_name")
            if not next_job or not next_queue then
                local message = cjson.decode(data)
                next_job, next_queue = message["options"]["st_job"], message["queue_name"]
            end
            -- The slot passes from job_id to next_job. The group's __leases__ entry is there
            -- (job_id was in the group) and at or below job_id's deadline, which is no later
            -- than next_job's queued one (see the key layout): only the group's zset moves.
            redis.call("zadd", group, now + queued_lease, next_job)
            fair_push(next_queue, redis_id, data, gk, false)
            redis.call("hset", ns .. ":job:" .. next_job, "state", "waiting")
            return 1, true
        end
    end
end

-- Groups whose __leases__ entry this script call already brought down to a claim's
-- deadline (every claim of one call leases until the same now + lease).
local claim_leased = {}

-- A number as Redis writes a script's number argument ("%.17g"), formatted once per call
-- for the times every claim of a fetch writes.
local claim_texts = {}
local function claim_text(number)
    local text = claim_texts[number]
    if not text then
        text = string.format("%.17g", number)
        claim_texts[number] = text
    end
    return text
end

-- Claim a message a worker fetched or is about to run: the verdict run | stale | done |
-- parked | later. A stale copy (the record points at another message) or a finished job is
-- left alone; a grouped job takes (or keeps) its slot, leased until now + lease; with the
-- group full and no slot held, park_it() parks the message (true) or cannot (false: later).
-- current: the record's state, msg and cur, when the caller read them (nil: read here).
local function claim(job_id, message_id, redis_id, gk, cap, now, lease, park_it, current)
    local record = ns .. ":job:" .. job_id
    if not current then
        current = redis.call("hmget", record, "state", "msg", "cur")
    end
    local state, current_msg, current_redis = current[1], current[2], current[3]
    if state then
        if current_msg ~= message_id or current_redis ~= redis_id then
            return "stale"
        elseif state ~= "waiting" and state ~= "parked" and state ~= "delayed"
            and state ~= "active" then
            return "done"
        end
    end
    if gk ~= "" then
        local group, deadline = ns .. ":group:" .. gk, claim_text(now + lease)
        -- Usually the job holds its slot (admitted when queued, or by a release): one
        -- command moves its lease. 0 means it holds none, or already this very deadline.
        if redis.call("zadd", group, "XX", "CH", deadline, job_id) == 0
            and not redis.call("zscore", group, job_id) then
            if redis.call("zcard", group) >= cap then
                if not park_it() then
                    return "later"
                end
                redis.call("hset", record, "state", "parked")
                return "parked"
            end
            redis.call("zadd", group, deadline, job_id)
        end
        if claim_leased[gk] ~= deadline then
            claim_leased[gk] = deadline
            redis.call("zadd", ns .. ":__leases__", "LT", deadline, gk)
        end
    end
    if not state then
        redis.call("hset", record, "msg", message_id, "cur", redis_id, "created_at", now,
            "group", gk, "failures", 0)
    end
    redis.call("hset", record, "state", "active", "started_at", claim_text(now))
    return "run"
end

-- Claim one fetched main-queue message (fetch_claim.lua). A message to park
-- is parked from its copy in the queue's message hash (messages) and acked (acks: the
-- worker's ack set of the queue) in this step; without that copy it is claimed later.
-- current: the record's state, msg and cur as the caller read them.
local function claim_fetched(job_id, message_id, redis_id, gk, cap, now, lease, messages, acks,
    current)
    return claim(job_id, message_id, redis_id, gk, cap, now, lease, function()
        local data = redis.call("hget", messages, redis_id)
        if data and redis.call("srem", acks, redis_id) > 0 then
            redis.call("hdel", messages, redis_id)
            park(gk, redis_id, data)
            return true
        end
        return false
    end, current)
end
