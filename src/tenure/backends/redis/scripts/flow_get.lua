-- flow_get: a workflow's record and its jobs' ids, in order.
--
-- KEYS[1]  the home queue's key prefix
-- ARGV[1]  the workflow's id
-- Returns  {{HGETALL of its record} (empty: none), {job ids}}

local p, id = KEYS[1], ARGV[1]
return {redis.call('HGETALL', wf_key(p, id)), redis.call('ZRANGE', p .. 'wfjobs:' .. id, 0, -1)}
