-- The fair order of a queue's admitted grouped messages: which one a worker fetches next
-- (docs/concepts/how-a-job-runs.md, "The fair order"). Sent after _prelude.lua.
-- Keys (q = ns:<queue>, a main queue):
--   q.fq         zset: redis message id -> score, the admitted grouped messages not fetched
--                yet (their data in q.msgs, as every queued message's); fetch_claim.lua pops
--                the lowest scores, after the list q (ungrouped messages, and messages handed
--                back or returned from a dead worker, which go there as Dramatiq puts them)
--   q.fq.v       string: the queue's virtual time V, the highest score fetched so far, or a
--                settled group's finish when nothing waited (the queue was not busy)
--   q.fq.groups  hash: group key -> "finish estimate" (ms): the group's virtual finish time
--                F (each admission charges the estimate; each settle swaps that charge for
--                the run's measured time) and its run-time estimate (a moving average of its
--                measured runs; a new group's is 0 until its first run settles, and its first
--                admissions are charged EPSILON)
-- Start-time fair queueing, charged by run time:
--   a message admitted to group g gets tag = max(V, F_g) and charges F_g with the group's
--   estimate (at least EPSILON): a group that used more run time waits longer, and a group
--   that was idle starts at V (it banks no credit)
--   sparse: a message admitted to a group that holds no other job, and whose tag is V,
--   scores V - EPSILON: it goes before every waiting message of a busy group; once its
--   group takes a second job (admitted or parked) it is demoted to V, so that a burst of
--   many groups' backlogs does not hold the sparse places
-- Invariants: a waiting message that is not sparse scores >= V; V never decreases; F_g - V
-- is the run time g used beyond its fair share (as far as the estimates of its unsettled
-- runs are right). A group's messages are fetched in admission order while its estimate
-- holds; a run much shorter than estimated may let the group's next admission go before
-- one admitted earlier (with a cap above 1 they run side by side anyway).
local FAIR_EPSILON = 0.001

-- What this script call read or changed of the fair order's state (each call of a script
-- runs the preludes afresh): V and a group's entry are read once per call, and a settle's
-- change of its group is written once, with the admission that follows it if any.
local fair_read = {}
local fair_unwritten = {}

local function fair_group(groups, gk)
    local key = groups .. "\0" .. gk
    local packed = fair_read[key]
    if packed == nil then
        packed = redis.call("hget", groups, gk) or false
        fair_read[key] = packed
    end
    if not packed then
        return nil
    end
    local finish, estimate = string.match(packed, "^(%S+) (%S+)$")
    return tonumber(finish), tonumber(estimate)
end

-- Keep a group's entry; written now, or (later) by the next store or by fair_flush().
local function fair_store(groups, gk, finish, estimate, later)
    local key = groups .. "\0" .. gk
    local packed = finish .. " " .. estimate
    fair_read[key] = packed
    if later then
        fair_unwritten[key] = {groups, gk}
    else
        fair_unwritten[key] = nil
        redis.call("hset", groups, gk, packed)
    end
end

local function fair_flush()
    for key, entry in pairs(fair_unwritten) do
        local packed = fair_read[key]
        if packed then
            redis.call("hset", entry[1], entry[2], packed)
        else
            redis.call("hdel", entry[1], entry[2])
        end
    end
    fair_unwritten = {}
end

local function fair_now(q)
    local v = fair_read[q]
    if v == nil then
        v = tonumber(redis.call("get", q .. ".fq.v")) or 0
        fair_read[q] = v
    end
    return v
end

local function fair_set_now(q, v)
    fair_read[q] = v
    redis.call("set", q .. ".fq.v", v)
end

-- A queue's fair order is kept in Redis's skiplist encoding of a sorted set. In the listpack
-- encoding (Redis's default below 128 members) an added member's place is found by parsing
-- every score stored before it, and the fair order's scores are fractions, added mostly at its
-- end. No command sees the encoding: a member longer than zset-max-listpack-value (64 bytes
-- by default), added and removed in the same step, converts the set (FAIR_CONVERT cannot be a
-- message's redis id). A set that empties is deleted, and the next one starts as a listpack.
local FAIR_CONVERT = "\0fair order: skiplist\0" .. string.rep("-", 100)

local function fair_add(q, tag, redis_id)
    local fq = q .. ".fq"
    local encoding = redis.call("object", "encoding", fq)
    if encoding == "listpack" or encoding == "ziplist" then
        redis.call("zadd", fq, 0, FAIR_CONVERT, tag, redis_id)
        redis.call("zrem", fq, FAIR_CONVERT)
    else
        redis.call("zadd", fq, tag, redis_id)
    end
end

-- Queue an admitted message of group gk in queue's fair order (sparse: the group holds no
-- other job).
local function fair_push(queue, redis_id, data, gk, sparse)
    local q = ns .. ":" .. queue
    redis.call("hset", q .. ".msgs", redis_id, data)
    local v = fair_now(q)
    local groups = q .. ".fq.groups"
    local finish, estimate = fair_group(groups, gk)
    if not finish then
        finish, estimate = v, 0
    end
    local tag = math.max(v, finish)
    fair_store(groups, gk, tag + math.max(estimate, FAIR_EPSILON), estimate)
    if sparse and tag == v then
        tag = v - FAIR_EPSILON
    end
    fair_add(q, tag, redis_id)
end

-- Group gk's only other job (job_id) lost its sparse place: it scores at least V now.
local function fair_demote(queue, job_id)
    local cur = redis.call("hget", ns .. ":job:" .. job_id, "cur")
    if cur then
        local q = ns .. ":" .. queue
        redis.call("zadd", q .. ".fq", "XX", "GT", fair_now(q), cur)
    end
end

-- Pop up to count messages of queue's fair order, lowest score first, moving V on to the
-- last one's score. Returns their redis ids, in order.
local function fair_pop(queue, count)
    local q = ns .. ":" .. queue
    local popped = redis.call("zpopmin", q .. ".fq", count)
    local ids = {}
    for i = 1, #popped, 2 do
        ids[#ids + 1] = popped[i]
    end
    if #popped > 0 and tonumber(popped[#popped]) > fair_now(q) then
        fair_set_now(q, tonumber(popped[#popped]))
    end
    return ids
end

-- A run of group gk's, started at started_at (ms), settled at now: the group's finish swaps
-- its estimate (charged at admission) for the measured run time, and its estimate moves
-- toward that time. With nothing waiting in the fair order, V moves up to the group's
-- finish. A group left holding no job and not ahead of V is forgotten. The change is
-- written with the group's next admission in this call, or by fair_flush().
local function fair_settle(queue, gk, started_at, now)
    if string.sub(queue, -3) == ".DQ" then
        queue = string.sub(queue, 1, -4)
    end
    local q = ns .. ":" .. queue
    local groups = q .. ".fq.groups"
    local ran = math.max(0, now - (started_at or now))
    local v = fair_now(q)
    local finish, estimate = fair_group(groups, gk)
    if not finish then
        finish, estimate = v, 0
    end
    finish = finish + ran - math.max(estimate, FAIR_EPSILON)
    if estimate <= 0 then
        estimate = ran
    else
        estimate = estimate + (ran - estimate) / 4
    end
    if finish > v and redis.call("zcard", q .. ".fq") == 0 then
        -- Nothing waits: the queue's virtual time catches up with the work done (a group
        -- owes nothing for run time no other group waited for).
        v = finish
        fair_set_now(q, v)
    end
    if finish <= v and redis.call("zcard", ns .. ":group:" .. gk) <= 1 then
        -- It holds no job but this run's (released next): forgotten, unless the release
        -- admits its next one (which starts at V all the same).
        local key = groups .. "\0" .. gk
        fair_read[key] = false
        fair_unwritten[key] = {groups, gk}
    else
        fair_store(groups, gk, finish, estimate, true)
    end
end
