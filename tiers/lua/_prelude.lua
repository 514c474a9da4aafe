-- Shared helpers (Redis scripts cannot import). A script is sent with the top-level definitions
-- of the preludes it uses in front of it, in the preludes' order (tiers/lua_scripts.py): each
-- definition starts at the beginning of a line with "local function name" or "local name =",
-- its body is indented, and the comment lines right above it go with it.
-- Key layout under the namespace ns (Dramatiq's own keys are ns:<queue> and ns:<queue>.msgs):
--   ns:job:<id>                hash: the job record (state, msg, cur, queue, org, attempts, ...;
--                              epoch, open and unsettled, the runs started and died:
--                              start.lua, absent in records no start of them touched)
--   ns:group:<gk>              zset: job ids admitted to the group, scored by lease deadline (ms)
--   ns:group:<gk>:parked       list: redis message ids held back because the group was full
--   ns:group:<gk>:parked.msgs  hash: redis message id -> encoded message
--   ns:__leases__              zset: group key -> earliest lease deadline, for the reaper.
--                              Every group holding a job has its entry, at or below its
--                              earliest deadline: admit() adds it, a lease refresh only
--                              moves deadlines later, and only reap.lua removes an entry,
--                              once its group is empty
--   ns:<queue>.fq, .fq.v, .fq.groups  the queue's fair order of admitted grouped messages
--                              (_fair.lua)
-- These layouts are read by every version of these scripts running at once (a rolling
-- deploy): a new layout must be readable, and its entries safe, in the older scripts.
local ns = KEYS[1]

local function push(queue, redis_id, data)
    redis.call("hset", ns .. ":" .. queue .. ".msgs", redis_id, data)
    redis.call("rpush", ns .. ":" .. queue, redis_id)
end

local function admit(gk, job_id, deadline)
    redis.call("zadd", ns .. ":group:" .. gk, deadline, job_id)
    redis.call("zadd", ns .. ":__leases__", "LT", deadline, gk)
end

local function park(gk, redis_id, data)
    local parked = ns .. ":group:" .. gk .. ":parked"
    redis.call("hset", parked .. ".msgs", redis_id, data)
    redis.call("rpush", parked, redis_id)
end
