-- enqueue: store new jobs of one queue, in order -> scheduled | queued.
--
-- KEYS[1]  the queue's key prefix "<prefix>:{<queue>}:"
-- ARGV[1]  the queue's name
-- ARGV[2]  n, the number of jobs
-- ARGV[3..8] what the jobs share: task, delay, run_at ('' = now + delay),
--          priority, max_attempts (''), timeout ('')
-- ARGV[9..] 3 values per job, in order: id, args (JSON), key ('')
--          (shared values once: nine per job made a fifth of a bulk enqueue's
--          time, packing and parsing them)
-- Returns  {created_at, then one entry per job, in order}:
--          run_at                    a job stored now (scheduled if run_at is
--                                    after created_at, else queued)
--          <HGETALL of the job>      the unfinished job that holds the spec's
--                                    key, or the job that has its id already
--                                    (a retried enqueue)
--          (one string per new job: a reply of four made an eighth of the
--          script's time)

local p, queue, n = KEYS[1], ARGV[1], tonumber(ARGV[2])
local now = clock()
local now_s = num(now)
local now_us = math.floor(now * 1000000)
local task, delay, run_at, priority = ARGV[3], tonumber(ARGV[4]), opt(ARGV[5]), ARGV[6]
local max_attempts, timeout = ARGV[7], ARGV[8]
local due = tonumber(run_at or now + delay)  -- the same for every job
local due_s = due == now and now_s or num(due)
local score = -tonumber(priority)  -- in the ready set
local last = tonumber(redis.call('GET', p .. 'seq') or '0')
local out, queued = {now_s}, 0
-- the sorted sets' new members, added at the end in a few ZADDs (one call per
-- set and chunk rather than three calls per job)
local adds = {ready = {}, scheduled = {}, all = {}, ['state:queued'] = {}, ['state:scheduled'] = {}}
local function add(set, score, member)
  local t = adds[set]
  t[#t + 1] = score
  t[#t + 1] = member
end

for i = 0, n - 1 do
  local b = 9 + i * 3
  local id, args, key = ARGV[b], ARGV[b + 1], opt(ARGV[b + 2])
  local jk = job_key(p, id)
  local holder = key and redis.call('HGET', p .. 'keys', key)
  if not holder and redis.call('EXISTS', jk) == 1 then holder = id end
  if holder then
    out[#out + 1] = redis.call('HGETALL', job_key(p, holder))
  else
    last = math.max(now_us, last + 1)
    local seq = int(last)
    -- every field in one HSET; the state's own sets right after (queue_job and
    -- schedule_job would read back what we know already)
    local state, rank = 'queued', ready_member(due, last, id)
    if due > now then state, rank = 'scheduled', nil end
    local fields = {'id', id, 'task', task, 'queue', queue, 'args', args, 'priority', priority,
      'run_at', due_s, 'created_at', now_s, 'seq', seq, 'fence', 0, 'attempts', 0,
      'stalls', 0, 'state', state}
    if rank then fields[#fields + 1] = 'rank'; fields[#fields + 1] = rank end
    if key then fields[#fields + 1] = 'key'; fields[#fields + 1] = key end
    if max_attempts ~= '' then
      fields[#fields + 1] = 'max_attempts'; fields[#fields + 1] = max_attempts
    end
    if timeout ~= '' then fields[#fields + 1] = 'timeout'; fields[#fields + 1] = timeout end
    redis.call('HSET', jk, unpack(fields))
    if rank then
      add('ready', score, rank)
      queued = queued + 1
    else
      add('scheduled', due, id)
    end
    add('state:' .. state, seq, id)
    add('all', seq, id)
    if key then redis.call('HSET', p .. 'keys', key, id) end
    out[#out + 1] = due_s
  end
end

for set, t in pairs(adds) do
  for i = 1, #t, 2000 do  -- unpack() takes a bounded number of values
    redis.call('ZADD', p .. set, unpack(t, i, math.min(i + 1999, #t)))
  end
end
redis.call('SET', p .. 'seq', int(last))
signal(p, queued)
return out
