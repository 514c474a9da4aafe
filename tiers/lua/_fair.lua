-- The fair order of a queue's admitted grouped messages: which one a worker fetches next
-- (docs/concepts/how-a-job-runs.md, "The fair order"). Sent after _prelude.lua.
-- Keys (q = ns:<queue>, a main queue):
--   q.fq         zset: redis message id -> score, the admitted grouped messages not fetched
--                yet (their data in q.msgs, as every queued message's); fetch_claim.lua pops
--                the lowest scores, after the list q (ungrouped messages, and messages handed
--                back or returned from a dead worker, which go there as Dramatiq puts them)
--   q.fq.v       string: the queue's virtual time V, the highest score fetched so far, or a
--                settled group's finish when nothing waited (the queue was not busy)
--   q.fq.groups  hash: group key -> "finish last estimate" (ms): the group's virtual finish
--                time F (each admission charges its estimate; each settle swaps that charge
--                for the run's measured time), the tag of its latest admission, and its
--                run-time estimate (a moving average of its measured runs); field "*": the
--                queue's estimate, a new group's first one
-- Start-time fair queueing, charged by run time:
--   a message admitted to group g gets tag = max(V, F_g, last_g + EPSILON) and charges F_g
--   with the group's estimate (at least EPSILON): a group that used more run time waits
--   longer, a group that was idle starts at V (it banks no credit), a group's own messages
--   keep their admission order
--   sparse: a message admitted to a group that holds no other job, and whose tag is V,
--   scores V - EPSILON: it goes before every waiting message of a busy group; once its
--   group takes a second job (admitted or parked) it is demoted to V, so that a burst of
--   many groups' backlogs does not hold the sparse places
-- Invariants: a waiting message that is not sparse scores >= V; V never decreases; a group's
-- tags increase with its admissions; F_g - V is the run time g used beyond its fair share
-- (as far as the estimates of its unsettled runs are right).
local FAIR_EPSILON = 0.001

local function fair_number(value)
    return string.format("%.17g", value)
end

local function fair_group(groups, gk)
    local packed = redis.call("hget", groups, gk)
    if not packed then
        return nil
    end
    local finish, last, estimate = string.match(packed, "^(%S+) (%S+) (%S+)$")
    return tonumber(finish), tonumber(last), tonumber(estimate)
end

local function fair_store(groups, gk, finish, last, estimate)
    redis.call("hset", groups, gk, fair_number(finish) .. " " .. fair_number(last) .. " "
        .. fair_number(estimate))
end

local function fair_now(q)
    return tonumber(redis.call("get", q .. ".fq.v")) or 0
end

-- Queue an admitted message of group gk in queue's fair order (sparse: the group holds no
-- other job). Returns the estimate charged, which the job's record keeps (field "fq") for
-- its settle.
local function fair_push(queue, redis_id, data, gk, sparse)
    local q = ns .. ":" .. queue
    redis.call("hset", q .. ".msgs", redis_id, data)
    local v = fair_now(q)
    local groups = q .. ".fq.groups"
    local finish, last, estimate = fair_group(groups, gk)
    if not finish then
        finish, last = v, v - FAIR_EPSILON
        estimate = tonumber(redis.call("hget", groups, "*")) or 0
    end
    local tag = math.max(v, finish, last + FAIR_EPSILON)
    local charge = math.max(estimate, FAIR_EPSILON)
    fair_store(groups, gk, tag + charge, tag, estimate)
    local score = tag
    if sparse and tag == v then
        score = v - FAIR_EPSILON
    end
    redis.call("zadd", q .. ".fq", fair_number(score), redis_id)
    return fair_number(charge)
end

-- Group gk's only other job (job_id) lost its sparse place: it scores at least V now.
local function fair_demote(queue, job_id)
    local cur = redis.call("hget", ns .. ":job:" .. job_id, "cur")
    if cur then
        local q = ns .. ":" .. queue
        redis.call("zadd", q .. ".fq", "XX", "GT", fair_number(fair_now(q)), cur)
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
        redis.call("set", q .. ".fq.v", popped[#popped])
    end
    return ids
end

-- A run of group gk's, started at started_at (ms), settled at now: the group's finish swaps
-- the estimate charged at its admission (charged; nil: it did not come through the fair
-- order, and is charged whole) for the measured run time, and the group's and the queue's
-- estimates move toward it. With nothing waiting in the fair order, V moves up to the
-- group's finish. A group left holding no job and not ahead of V is forgotten.
local function fair_settle(queue, gk, started_at, charged, now)
    if string.sub(queue, -3) == ".DQ" then
        queue = string.sub(queue, 1, -4)
    end
    local q = ns .. ":" .. queue
    local groups = q .. ".fq.groups"
    local ran = math.max(0, now - (started_at or now))
    local v = fair_now(q)
    local finish, last, estimate = fair_group(groups, gk)
    if not finish then
        finish, last, estimate = v, v - FAIR_EPSILON, 0
    end
    if charged then
        finish = finish + ran - charged
    else
        finish = math.max(finish, v) + ran
    end
    if estimate <= 0 then
        estimate = ran
    else
        estimate = estimate + (ran - estimate) / 4
    end
    if finish > v and redis.call("zcard", q .. ".fq") == 0 then
        -- Nothing waits: the queue's virtual time catches up with the work done (a group
        -- owes nothing for run time no other group waited for).
        v = finish
        redis.call("set", q .. ".fq.v", fair_number(v))
    end
    if finish <= v and redis.call("exists", ns .. ":group:" .. gk) == 0 then
        redis.call("hdel", groups, gk)
    else
        fair_store(groups, gk, finish, last, estimate)
    end
    local queue_estimate = tonumber(redis.call("hget", groups, "*"))
    if queue_estimate then
        queue_estimate = queue_estimate + (ran - queue_estimate) / 16
    else
        queue_estimate = ran
    end
    redis.call("hset", groups, "*", fair_number(queue_estimate))
end
