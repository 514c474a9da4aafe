-- A worker's look for dead workers (tiers/dead_workers.py): its own heartbeat, then the
-- workers whose heartbeat is older than the heartbeat timeout.
-- ARGV: worker_id, now_ms (the heartbeat, from the worker's clock as every heartbeat it
--       writes), timeout_ms, max_dead
-- Returns {Redis's time in ms, {worker id, heartbeat, ...}}: up to max_dead workers taken
-- for dead, oldest first. The caller runs Dramatiq's maintenance at that time (its dispatch
-- script takes the same workers for dead by the timestamp it is given).
-- Older by Redis's clock, not the caller's: every worker looks, and one whose host clock ran
-- ahead would otherwise take live workers for dead and send their messages back to the
-- queues (a heartbeat is written from its worker's clock, which the start check keeps within
-- SPEEDTIER_MAX_CLOCK_OFFSET_SECONDS of Redis's: shared/clock_offset.py).
local time = redis.call("time")
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
local heartbeats = ns .. ":__heartbeats__"
redis.call("zadd", heartbeats, ARGV[2], ARGV[1])
return {now, redis.call("zrangebyscore", heartbeats, 0, now - tonumber(ARGV[3]), "WITHSCORES",
    "LIMIT", 0, tonumber(ARGV[4]))}
