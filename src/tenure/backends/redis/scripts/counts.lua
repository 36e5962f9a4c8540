-- counts: how many jobs of the queue are in each state.
--
-- KEYS[1]  the queue's key prefix
-- ARGV     the states
-- Returns  one count per state, in order

local out = {}
for i, state in ipairs(ARGV) do out[i] = redis.call('ZCARD', state_key(KEYS[1], state)) end
return out
