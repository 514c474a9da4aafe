-- One look at a worker's idle queues in place of each queue's consumer polling its own: the
-- worker's heartbeat (what every fetch gives it: its consumers sleep meanwhile, and a
-- worker without heartbeats is taken for dead) and how many messages each queue holds.
-- ARGV: now_ms, worker_id, then the queue names. Returns each queue's length (its list and
-- its fair order, _fair.lua), in order.
redis.call("zadd", ns .. ":__heartbeats__", tonumber(ARGV[1]), ARGV[2])
local lengths = {}
for i = 3, #ARGV do
    local q = ns .. ":" .. ARGV[i]
    lengths[#lengths + 1] = redis.call("llen", q) + redis.call("zcard", q .. ".fq")
end
return lengths
