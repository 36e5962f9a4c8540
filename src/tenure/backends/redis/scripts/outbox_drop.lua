-- outbox_drop: delete messages the relay applied from the queue's outbox, in
-- one call: each from the head when it is there (the usual case: the relay
-- reads the head), else by value (another relay, the sweeper's, took it first
-- or the list moved). Never by position alone: a second relay of the same
-- head would drop messages nobody applied.
--
-- KEYS[1]  the queue's key prefix
-- ARGV     the messages applied, in the order read
-- Returns  how many were deleted

local outbox = KEYS[1] .. 'outbox'
local gone = 0
for _, m in ipairs(ARGV) do
  if redis.call('LINDEX', outbox, 0) == m then
    redis.call('LPOP', outbox)
    gone = gone + 1
  else
    gone = gone + redis.call('LREM', outbox, 1, m)
  end
end
return gone
