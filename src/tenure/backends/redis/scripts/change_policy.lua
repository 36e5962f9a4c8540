-- change_policy: store a queue's new policy if the stored one is still the one
-- the caller read and merged its changes into (compare and set; the caller
-- reads again and retries otherwise). Idle workers of the queue wake: the
-- change may let them claim (a resume, a limit raised).
--
-- KEYS[1]  the queue's key prefix
-- ARGV[1]  the policy read ('' when none was stored)
-- ARGV[2]  the new policy (JSON)
-- Returns  1 if stored, 0 if the stored policy changed meanwhile

local p = KEYS[1]
if (redis.call('GET', p .. 'policy') or '') ~= ARGV[1] then return 0 end
redis.call('SET', p .. 'policy', ARGV[2])
signal(p, redis.call('ZCARD', p .. 'ready'))
return 1
