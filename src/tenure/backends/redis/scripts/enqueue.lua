-- enqueue: store new jobs of one queue, in order -> scheduled | queued.
--
-- KEYS[1]  the queue's key prefix "<prefix>:{<queue>}:"
-- ARGV[1]  the queue's name
-- ARGV[2]  n, the number of jobs
-- ARGV[3..12] what the jobs share: task, delay, run_at ('' = now + delay),
--          priority, max_attempts (''), timeout (''), traceparent (''),
--          concurrency_key (''), debounce ('' or '1': delay is the debounce),
--          unique_for (''), '1' if each job has its own concurrency_key
-- ARGV[14..] 3 values per job, in order: id, args (JSON), key (''); 4 with
--          '1' in ARGV[13]: and its concurrency_key ('')
--          (shared values once: nine per job made a fifth of a bulk enqueue's
--          time, packing and parsing them)
-- Returns  {created_at, then one entry per job, in order}:
--          run_at                    a job stored now (scheduled if run_at is
--                                    after created_at, else queued)
--          <HGETALL of the job>      the unfinished job that holds the spec's
--                                    key (debounce: one not started yet, given
--                                    the spec's args and run_at; unique_for: or
--                                    one finished less than unique_for ago), or
--                                    the job that has its id already (a
--                                    retried enqueue)
--          (one string per new job: a reply of four made an eighth of the
--          script's time)

local p, queue, n = KEYS[1], ARGV[1], tonumber(ARGV[2])
local now = clock()
local now_s = num(now)
local now_us = math.floor(now * 1000000)
local task, delay, run_at, priority = ARGV[3], tonumber(ARGV[4]), opt(ARGV[5]), ARGV[6]
local max_attempts, timeout, traceparent = ARGV[7], ARGV[8], ARGV[9]
local ckey, debounce, unique_for = opt(ARGV[10]), ARGV[11] == '1', tonumber(opt(ARGV[12]))
local stride = ARGV[13] == '1' and 4 or 3
local by_key = {}  -- with a concurrency_key per job: the queued ones' pairs per key
local due = tonumber(run_at or now + delay)  -- the same for every job
local due_s = due == now and now_s or num(due)
local score = -tonumber(priority)  -- in the ready set
local last = tonumber(redis.call('GET', p .. 'seq') or '0')
local out, queued = {now_s}, 0
-- due is shared, so is the state: the jobs' sorted sets, filled here and added
-- at the end in a few ZADDs (one call per set and chunk, not three per job)
local state = due > now and 'scheduled' or 'queued'
local enqueued = cjson.encode({task = task, state = state})  -- every new job's event data
local new_ids, new_data = {}, {}
local by_due, by_seq = {}, {}  -- (score, member) pairs: ready or scheduled; all and state:*

-- A retried enqueue sends ids stored already: one EXISTS over the call's job
-- keys tells whether any is (usually none), not one call per job; an id sent
-- twice in one call is found in `stored`.
local keys = {}
for i = 1, n do keys[i] = job_key(p, ARGV[14 + (i - 1) * stride]) end
local any = false
for i = 1, n, 1000 do
  if redis.call('EXISTS', unpack(keys, i, math.min(i + 999, n))) > 0 then any = true; break end
end
local stored = {}

-- every field in one HSET, from one table whose shared values are set once
-- (id, args and seq at 2, 8 and 16, then the job's own optional fields)
local fields = {'id', '', 'task', task, 'queue', queue, 'args', '', 'priority', priority,
  'run_at', due_s, 'created_at', now_s, 'seq', '', 'fence', 0, 'attempts', 0,
  'stalls', 0, 'state', state}
if max_attempts ~= '' then
  fields[#fields + 1] = 'max_attempts'; fields[#fields + 1] = max_attempts
end
if timeout ~= '' then fields[#fields + 1] = 'timeout'; fields[#fields + 1] = timeout end
if traceparent ~= '' then
  fields[#fields + 1] = 'traceparent'; fields[#fields + 1] = traceparent
end
if ckey then fields[#fields + 1] = 'ck'; fields[#fields + 1] = ckey end
if unique_for then fields[#fields + 1] = 'uf'; fields[#fields + 1] = ARGV[12] end
local shared = #fields

-- The job that holds key for this enqueue (nil: none): the unfinished one;
-- with unique_for, one finished less than unique_for ago; with debounce, one
-- not started yet, which gets args and run_at (a started one keeps the key
-- until it finishes, but the new job takes it).
local function holder_of(key, args)
  local holder = redis.call('HGET', p .. 'keys', key)
  if not holder and unique_for then
    holder = redis.call('HGET', p .. 'ukeys', key)
    local at = holder and redis.call('HGET', job_key(p, holder), 'finished_at')
    if not (at and tonumber(at) + unique_for > now) then holder = nil end
  end
  if holder and debounce then
    local jk = job_key(p, holder)
    local state = redis.call('HGET', jk, 'state')
    if state == 'queued' or state == 'scheduled' then
      if state == 'queued' then ck.unqueued(p, holder) end
      redis.call('HSET', jk, 'args', args)
      redis.call('ZREM', p .. 'scheduled', holder)
      schedule_job(p, holder, due, state)
    else
      holder = nil
    end
  end
  return holder or nil
end

for i = 1, n do
  local b = 14 + (i - 1) * stride
  local id, args, key = ARGV[b], ARGV[b + 1], opt(ARGV[b + 2])
  local jck = stride == 4 and opt(ARGV[b + 3])
  local holder = key and holder_of(key, args)
  if not holder and (stored[id] or (any and redis.call('EXISTS', keys[i]) == 1)) then
    holder = id
  end
  if holder then
    out[#out + 1] = redis.call('HGETALL', job_key(p, holder))
  else
    last = math.max(now_us, last + 1)
    local seq = int(last)
    fields[2], fields[8], fields[16] = id, args, seq
    local m = shared
    if state == 'queued' then
      local member = ready_member(due, last, id)
      by_due[#by_due + 1] = score
      by_due[#by_due + 1] = member
      if stride == 4 then
        local pairs_of = by_key[jck or false] or {}
        pairs_of[#pairs_of + 1], pairs_of[#pairs_of + 2] = score, member
        by_key[jck or false] = pairs_of
      end
    else
      by_due[#by_due + 1] = due
      by_due[#by_due + 1] = id
    end
    if key then fields[m + 1], fields[m + 2], m = 'key', key, m + 2 end
    if jck then fields[m + 1], fields[m + 2], m = 'ck', jck, m + 2 end
    redis.call('HSET', keys[i], unpack(fields, 1, m))
    by_seq[#by_seq + 1] = seq
    by_seq[#by_seq + 1] = id
    if key then redis.call('HSET', p .. 'keys', key, id) end
    stored[id] = true
    new_ids[#new_ids + 1], new_data[#new_data + 1] = id, enqueued
    out[#out + 1] = due_s
  end
end
if state == 'queued' then
  queued = #by_due / 2
  if stride == 3 then ck.added(p, ckey, by_due) end
  for k, pairs_of in pairs(by_key) do ck.added(p, k, pairs_of) end
end

if state == 'scheduled' and #by_due > 0 then signal_sooner(p, due) end
local adds = {[state == 'queued' and 'ready' or 'scheduled'] = by_due, all = by_seq,
  ['state:' .. state] = by_seq}
for set, t in pairs(adds) do
  for i = 1, #t, 2000 do  -- unpack() takes a bounded number of values
    redis.call('ZADD', p .. set, unpack(t, i, math.min(i + 1999, #t)))
  end
end
redis.call('SET', p .. 'seq', int(last))
append_events(p, 'enqueued', new_ids, new_data)
signal(p, queued)
return out
