-- sweep_guard: the fleet's sweep guard. A sweep goes ahead unless any process
-- swept less than min_interval seconds ago (by Redis's clock); one that goes
-- ahead marks the time. This is SET NX PX with the "NX" judged against each
-- caller's own interval, so that a forced sweep (min_interval 0) also counts
-- for the others. A clock that went back never stops sweeps.
--
-- KEYS[1]  the guard, "<prefix>:{@}:sweep"
-- ARGV[1]  min_interval (seconds)
-- ARGV[2]  how long the mark lives (ms): longer than any sweep interval
-- Returns  1 (sweep now), or the seconds until a sweep is allowed, as a string

local now = clock()
local last = tonumber(redis.call('GET', KEYS[1]) or '')
local interval = tonumber(ARGV[1])
if last and now >= last and now - last < interval then return num(interval - (now - last)) end
redis.call('SET', KEYS[1], num(now), 'PX', ARGV[2])
return 1
