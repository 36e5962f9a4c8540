-- enqueue_tick: the job of a schedule's tick, stored only by the script that
-- moves the schedule's last tick forward: one job per tick, however many
-- workers tick. The loader puts enqueue.lua after this guard, which stores
-- the job as an enqueue of one job does.
--
-- KEYS[1]  the queue's key prefix "<prefix>:{<queue>}:"
-- ARGV     enqueue's, for one job, then three more: the schedule's name, the
--          tick (seconds since the epoch) and the job's id
-- Returns  {} when the schedule's last tick is the same or later (nothing
--          stored), else enqueue's reply
--
-- ticks  HASH  schedule name -> "<tick> <job id>" (the last tick that made a job)

do
  local name, tick, id = ARGV[#ARGV - 2], tonumber(ARGV[#ARGV - 1]), ARGV[#ARGV]
  local last = redis.call('HGET', KEYS[1] .. 'ticks', name)
  if last and tonumber(string.match(last, '^%S+')) >= tick then return {} end
  redis.call('HSET', KEYS[1] .. 'ticks', name, num(tick) .. ' ' .. id)
end

