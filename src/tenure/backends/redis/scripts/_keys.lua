-- _keys.lua: concurrency keys (QueuePolicy's _per_key limits and fair turns),
-- filling the table ck that _lib.lua declares. The loader puts it after
-- _lib.lua. Per queue, under its prefix p (keys.py lists them):
--
--   kq:<key>  ZSET  the queued jobs of a concurrency key, as in ready (same score
--                   and member); kept for every job that has a key
--   kact      HASH  key -> its active jobs
--   kload     ZSET  key -> -(queued + active), the keys with any (key_counts)
--   krate     HASH  key -> "<tokens> <at>": its rate bucket, as the queue's
--   kfull     ZSET  key -> when its bucket is full, for a key left with no job
--
-- and only while the queue's policy is keyed (max_active_per_key,
-- rate_limit_per_key or fair set; rebuilt when the policy changes):
--
--   knone     ZSET  the queued jobs without a key (one key of their own)
--   kopen     ZSET  the head (first queued job, its member of ready) of each
--                   key that may start a job: by -priority, or by its turn when
--                   fair (a key served goes to the back), so a claim reads the
--                   heads, never the jobs held back behind a key at its limit
--   khead     HASH  ring -> its head in kopen, 'b' (at max_active_per_key: back
--                   when one of its attempts ends) or 'w' (its bucket is empty:
--                   back at its time in kwait); ring is 'k' .. key, 'n' for none
--   kwait     ZSET  ring -> when its bucket has a token again
--   kturn     STRING the last turn given (fair)

local function ring_of(key) return key and ('k' .. key) or 'n' end
local function key_of(ring) return ring ~= 'n' and string.sub(ring, 2) or false end
local function kq_key(p, key) return key and (p .. 'kq:' .. key) or (p .. 'knone') end

-- The queue's per-key limits (false: not keyed), read once per queue and call.
local modes = {}
function ck.mode(p)
  local m = modes[p]
  if m == nil then
    local policy = policy_of(p)
    m = false
    if policy then
      local max, rate = tonumber(policy.max_active_per_key), tonumber(policy.rate_limit_per_key)
      if max or rate or policy.fair == true then
        m = {max = max, rate = rate, per = tonumber(policy.rate_interval_per_key) or 1,
          fair = policy.fair == true}
      end
    end
    modes[p] = m
  end
  return m
end

-- The policy just changed (change_policy.lua): read it again.
function ck.forget(p)
  policies[p], modes[p] = nil, nil
end

-- kload: by is +1 for a job that left (queued or active), -1 for one that came.
-- A key left with none: its rate bucket, once full again, is as good as
-- absent, and prune.lua drops it then (kfull: key -> when it is full).
local function load(p, key, by)
  if tonumber(redis.call('ZINCRBY', p .. 'kload', by, key)) >= 0 then
    redis.call('ZREM', p .. 'kload', key)
    redis.call('HDEL', p .. 'kact', key)  -- 0 since its last attempt ended
    local m = ck.mode(p)
    local b = m and m.rate and redis.call('HGET', p .. 'krate', key)
    if b then
      local tokens, at = string.match(b, '(%S+) (%S+)')
      local full = tonumber(at) + math.max(m.rate - tonumber(tokens), 0) * m.per / m.rate
      redis.call('ZADD', p .. 'kfull', num(full), key)
    end
  end
end

-- Put the head of an open (or idle) key in kopen again, after its queued jobs
-- changed; a key held back ('b', 'w') stays so. When fair, a key keeps its
-- turn while it stays open (a claim that serves it moves it: served).
function ck.touch(p, key)
  local m = ck.mode(p)
  if not m then return end
  local ring = ring_of(key)
  local cur = redis.call('HGET', p .. 'khead', ring)
  if cur == 'b' or cur == 'w' then return end
  local head = redis.call('ZRANGE', kq_key(p, key), 0, 0, 'WITHSCORES')
  if (cur or nil) == head[1] then return end
  local score = head[2]
  if cur then
    if m.fair then score = redis.call('ZSCORE', p .. 'kopen', cur) end
    redis.call('ZREM', p .. 'kopen', cur)
  end
  if not head[1] then
    redis.call('HDEL', p .. 'khead', ring)
    return
  end
  if m.fair and not cur then score = redis.call('INCR', p .. 'kturn') end
  redis.call('ZADD', p .. 'kopen', score, head[1])
  redis.call('HSET', p .. 'khead', ring, head[1])
end

-- Jobs of key (false: none) joined ready: pairs is {score, member, ...}.
function ck.added(p, key, pairs)
  if #pairs == 0 then return end
  if key then
    call_with('ZADD', kq_key(p, key), pairs)
    load(p, key, -#pairs / 2)
  elseif ck.mode(p) then
    call_with('ZADD', kq_key(p, key), pairs)
  else
    return
  end
  ck.touch(p, key)
end

-- A job of key left ready other than by a claim (cancel, delete, debounce).
function ck.removed(p, key, member)
  if key then
    redis.call('ZREM', kq_key(p, key), member)
    load(p, key, 1)
  elseif ck.mode(p) then
    redis.call('ZREM', kq_key(p, key), member)
  end
  ck.touch(p, key)
end

-- An active job of key ended its attempt: its place is free, and a key held at
-- max_active_per_key may start again.
function ck.ended(p, key)
  if not key then return end
  local active = tonumber(redis.call('HINCRBY', p .. 'kact', key, -1))
  load(p, key, 1)
  local m = ck.mode(p)
  -- held at its limit, it had max_active_per_key active jobs before (or more:
  -- the limit was lowered while they ran)
  if m and m.max and active >= m.max - 1
      and redis.call('HGET', p .. 'khead', ring_of(key)) == 'b' then
    redis.call('HDEL', p .. 'khead', ring_of(key))
    ck.touch(p, key)
  end
end

-- A key's rate bucket now: its tokens (nil without rate_limit_per_key).
local function tokens_of(p, m, key, now)
  if not (m.rate and key) then return nil end
  local b = redis.call('HGET', p .. 'krate', key)
  if not b then return m.rate end
  local tokens, at = string.match(b, '(%S+) (%S+)')
  return math.min(m.rate, tonumber(tokens) + math.max(now - tonumber(at), 0) * m.rate / m.per)
end

-- How many jobs of key may start now (math.huge: no limit), and its tokens.
local function room_of(p, m, key, now)
  if not key then return math.huge, nil end
  local room = math.huge
  if m.max then room = m.max - tonumber(redis.call('HGET', p .. 'kact', key) or '0') end
  local tokens = tokens_of(p, m, key, now)
  if tokens then room = math.min(room, math.floor(tokens + 1e-9)) end
  return room, tokens
end

-- Hold a key back: out of kopen until an attempt of it ends ('b') or its
-- bucket has a token again ('w').
local function hold(p, m, key, head, tokens, now)
  local ring = ring_of(key)
  redis.call('ZREM', p .. 'kopen', head)
  if tokens and tokens < 1 - 1e-9 then
    redis.call('HSET', p .. 'khead', ring, 'w')
    redis.call('ZADD', p .. 'kwait', num(now + (1 - tokens) * m.per / m.rate), ring)
  else
    redis.call('HSET', p .. 'khead', ring, 'b')
  end
end

-- The keys whose buckets have a token again are open again.
local function wake(p, now)
  local due = redis.call('ZRANGE', p .. 'kwait', '-inf', num(now), 'BYSCORE', 'LIMIT', 0, 1000)
  if #due == 0 then return end
  call_with('ZREM', p .. 'kwait', due)
  for _, ring in ipairs(due) do
    redis.call('HDEL', p .. 'khead', ring)
    ck.touch(p, key_of(ring))
  end
end

-- The open keys, in kopen's order, that may start a job now: up to n of them,
-- each {key, room, head, score}; those found at their limit are held back.
local function open_keys(p, m, n, now)
  local found, start, held = {}, 0, {}
  while #found < n do
    local page = redis.call('ZRANGE', p .. 'kopen', start, start + n - 1, 'WITHSCORES')
    for i = 1, #page, 2 do
      local key = redis.call('HGET', job_key(p, string.sub(page[i], 33)), 'ck')
      local room, tokens = room_of(p, m, key, now)
      if room > 0 then
        if #found < n then
          found[#found + 1] = {key = key, room = room, head = page[i], score = page[i + 1]}
        end
      else
        held[#held + 1] = {key, page[i], tokens}
      end
    end
    if #page < 2 * n then break end
    start = start + n
  end
  for _, h in ipairs(held) do hold(p, m, h[1], h[2], h[3], now) end
  return found
end

-- The next job a claim may take of key k (k.n taken so far): k.member and
-- k.score, nil when none is left or the key has no room left.
local function advance(p, k, skip)
  k.member, k.score = nil, nil
  if k.n >= k.room then return end
  local member, score = k.head, k.score_s
  if k.n > 0 then
    local r = redis.call('ZRANGE', kq_key(p, k.key), k.n, k.n, 'WITHSCORES')
    member, score = r[1], r[2]
  end
  if member and skip and skip[redis.call('HGET', job_key(p, string.sub(member, 33)), 'task')] then
    return  -- a job the worker passes over ends its key's part of the claim
  end
  k.member, k.score = member, score
end

-- The best n jobs a keyed queue's claim may take now, as flat {member, score}
-- pairs like ready_entries: fair, in turns across the open keys (a round takes
-- one job of each); else by priority, run_at and seq across their heads (a
-- key's next job enters as its head is taken). Each key gives at most its room.
local heads = {}  -- per queue: key (false: none) -> its head in kopen, as select read it
function ck.select(p, n, skip, now)
  local m = ck.mode(p)
  wake(p, now)
  local open = open_keys(p, m, n, now)
  heads[p] = {}
  for _, k in ipairs(open) do
    heads[p][k.key] = k.head
    k.n, k.score_s = 0, k.score
    advance(p, k, skip)
  end
  local out = {}
  -- a key's next job is read when it is looked at (none after the last take)
  local function take(k)
    out[#out + 1], out[#out + 2] = k.member, k.score
    k.n, k.stale = k.n + 1, true
  end
  local function next_of(k)
    if k.stale then
      k.stale = false
      advance(p, k, skip)
    end
    return k.member
  end
  if m.fair then
    local more = true
    while more and #out < 2 * n do
      more = false
      for _, k in ipairs(open) do
        if #out < 2 * n and next_of(k) then
          take(k)
          more = true
        end
      end
    end
    return out
  end
  while #out < 2 * n do
    local best, bs
    for _, k in ipairs(open) do
      if next_of(k) then
        local score = tonumber(k.score)
        if not best or score < bs or (score == bs and k.member < best.member) then
          best, bs = k, score
        end
      end
    end
    if not best then break end
    take(best)
  end
  return out
end

-- A keyed queue's claim took n jobs of key, which has active ones now: a
-- token each; at its limit, it is held back, else its next job is its head,
-- at the back of the turns when fair.
local function served(p, m, key, active, n, now)
  local room, tokens = math.huge, tokens_of(p, m, key, now)
  if m.max and active then room = m.max - active end
  if tokens then
    tokens = tokens - n
    redis.call('HSET', p .. 'krate', key, num(tokens) .. ' ' .. num(now))
    room = math.min(room, math.floor(tokens + 1e-9))
  end
  local ring = ring_of(key)
  local cur = heads[p] and heads[p][key] or redis.call('HGET', p .. 'khead', ring)
  if cur == 'b' or cur == 'w' then return end
  if room <= 0 and cur then return hold(p, m, key, cur, tokens, now) end
  if cur then redis.call('ZREM', p .. 'kopen', cur) end
  local head = redis.call('ZRANGE', kq_key(p, key), 0, 0, 'WITHSCORES')
  if not head[1] then
    if cur then redis.call('HDEL', p .. 'khead', ring) end
    return
  end
  redis.call('ZADD', p .. 'kopen', m.fair and redis.call('INCR', p .. 'kturn') or head[2], head[1])
  redis.call('HSET', p .. 'khead', ring, head[1])
end

-- A claim took members (of ready), cks[i] the key of members[i] (false:
-- none), in the order served: out of their keys' queued jobs, into their
-- active counts, a token each; the keys served go to the back of the turns
-- (fair), or are held back at their limit.
function ck.claimed(p, members, cks, now)
  local m = ck.mode(p)
  local order, by_key = {}, {}
  for i, key in ipairs(cks) do
    if key or m then
      local g = by_key[key]
      if not g then
        g = {}
        by_key[key] = g
        order[#order + 1] = key
      end
      g[#g + 1] = members[i]
    end
  end
  for _, key in ipairs(order) do
    local g = by_key[key]
    call_with('ZREM', kq_key(p, key), g)
    local active = key and tonumber(redis.call('HINCRBY', p .. 'kact', key, #g))
    if m then served(p, m, key, active, #g, now) end
  end
end

-- Drop the rate buckets of keys left with no job that are full by now.
function ck.forget_buckets(p, now)
  local full = redis.call('ZRANGE', p .. 'kfull', '-inf', num(now), 'BYSCORE', 'LIMIT', 0, 1000)
  for _, key in ipairs(full) do
    if not redis.call('ZSCORE', p .. 'kload', key) then redis.call('HDEL', p .. 'krate', key) end
  end
  call_with('ZREM', p .. 'kfull', full)
end

-- The queue's policy changed from one whose ck.mode was old: if its per-key
-- fields did, its keyed sets are made again from kq:* (and knone from ready,
-- less every key's jobs, if it was not keyed), or dropped.
function ck.rebuild(p, old)
  local m = ck.mode(p)
  if old and m and old.max == m.max and old.rate == m.rate and old.per == m.per
      and old.fair == m.fair then
    return
  end
  local was_keyed = old and true
  redis.call('DEL', p .. 'kopen', p .. 'khead', p .. 'kwait')
  if not m then
    redis.call('DEL', p .. 'knone')
    return
  end
  local keys = redis.call('ZRANGE', p .. 'kload', 0, -1)
  if not was_keyed then  -- (a ZDIFFSTORE of ready and every kq:<key> took seconds)
    redis.call('ZUNIONSTORE', p .. 'knone', 1, p .. 'ready')
    for _, key in ipairs(keys) do
      call_with('ZREM', p .. 'knone', redis.call('ZRANGE', kq_key(p, key), 0, -1))
    end
  end
  ck.touch(p, false)
  for _, key in ipairs(keys) do ck.touch(p, key) end
end

-- A queued job id leaves the ready set other than by a claim (a cancel, its
-- queue's deletion, debounce): its member is made from its run_at and seq.
function ck.unready(p, id, run_at, seq, key)
  local member = ready_member(tonumber(run_at), tonumber(seq), id)
  redis.call('ZREM', p .. 'ready', member)
  ck.removed(p, key, member)
end

-- Debounce moves a queued job id to scheduled.
function ck.unqueued(p, id)
  local f = redis.call('HMGET', job_key(p, id), 'run_at', 'seq', 'ck')
  ck.unready(p, id, f[1], f[2], f[3])
end
