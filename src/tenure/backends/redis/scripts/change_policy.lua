-- change_policy: store a queue's new policy if the stored one is still the one
-- the caller read and merged its changes into (compare and set; the caller
-- reads again and retries otherwise).
--
-- KEYS[1]  the queue's policy key
-- ARGV[1]  the policy read ('' when none was stored)
-- ARGV[2]  the new policy (JSON)
-- Returns  1 if stored, 0 if the stored policy changed meanwhile

if (redis.call('GET', KEYS[1]) or '') ~= ARGV[1] then return 0 end
redis.call('SET', KEYS[1], ARGV[2])
return 1
