-- Claim a fetched batch of main-queue messages in one step, when the consumer fetches it
-- (claim.lua's verdicts). A message with a group takes (or keeps) its group slot here, leased
-- for lease_ms: the worker holding it keeps that lease fresh until the run settles, as it
-- does for a running job. When the group is full and the job holds no slot (its slot was
-- reaped), the message is parked from its copy in the queue's message hash and acked to
-- Dramatiq in the same step (the worker drops it: when the slot frees, the same redis id
-- comes back to the queue, where no ack of the old delivery may touch it).
-- ARGV: now_ms, lease_ms, queue, worker_id, then per message: job_id, message_id, redis_id,
--       group_key, cap
-- Returns one verdict per message: run | stale | done | parked | later (claim it at start).
local now, lease, queue, worker_id = tonumber(ARGV[1]), tonumber(ARGV[2]), ARGV[3], ARGV[4]
local messages = ns .. ":" .. queue .. ".msgs"
local acks = ns .. ":__acks__." .. worker_id .. "." .. queue
local verdicts = {}
for i = 5, #ARGV, 5 do
    verdicts[#verdicts + 1] = claim_fetched(ARGV[i], ARGV[i + 1], ARGV[i + 2], ARGV[i + 3],
        tonumber(ARGV[i + 4]), now, lease, messages, acks)
end
return verdicts
