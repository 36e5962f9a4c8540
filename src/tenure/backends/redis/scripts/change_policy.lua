-- change_policy: store a queue's new policy if the stored one is still the one
-- the caller read and merged its changes into (compare and set; the caller
-- reads again and retries otherwise), or at once (set_policy). Idle workers of
-- the queue wake: the change may let them claim (a resume, a limit raised).
-- The per-key sets of the claim (_keys.lua) are made again if its per-key
-- fields changed.
--
-- KEYS[1]  the queue's key prefix
-- ARGV[1]  the policy read ('' when none was stored)
-- ARGV[2]  the new policy (JSON)
-- ARGV[3]  optional, '1': store it whatever the stored one is
-- Returns  1 if stored, 0 if the stored policy changed meanwhile

local p = KEYS[1]
if ARGV[3] ~= '1' and (redis.call('GET', p .. 'policy') or '') ~= ARGV[1] then return 0 end
local old = ck.mode(p)
redis.call('SET', p .. 'policy', ARGV[2])
ck.forget(p)
ck.rebuild(p, old)
signal(p, redis.call('ZCARD', p .. 'ready'))
return 1
