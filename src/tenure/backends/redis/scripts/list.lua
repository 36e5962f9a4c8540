-- list: one queue's jobs, newest first (by seq), optionally in one state.
--
-- KEYS[1]  the queue's key prefix
-- ARGV     state ('' = any), max seq (a ZRANGE score bound: '+inf', 'N' or '(N'), limit
-- Returns  flat pairs {seq, {HGETALL}}, newest first

local p = KEYS[1]
local set = p .. 'all'
if ARGV[1] ~= '' then set = state_key(p, ARGV[1]) end
local ids = redis.call('ZRANGE', set, ARGV[2], '-inf', 'BYSCORE', 'REV', 'LIMIT', 0,
  tonumber(ARGV[3]), 'WITHSCORES')
local out = {}
for i = 1, #ids, 2 do
  out[#out + 1] = ids[i + 1]
  out[#out + 1] = redis.call('HGETALL', job_key(p, ids[i]))
end
return out
