-- fail: record an unsuccessful attempt and apply the decision tenure.core.retry
-- made: active -> queued | scheduled | dead | cancelled (a job whose cancel was
-- requested is cancelled whatever the decision).
--
-- KEYS[1]  the queue's key prefix
-- ARGV     job id, fence, outcome, error ('' = none, else '=' .. error),
--          state (queued | scheduled | dead | cancelled), delay (seconds, for
--          scheduled), dead_reason (''), stall ('1' when the attempt spends a
--          stall), its events (JSON: [[kind, data or null], ...], see
--          tenure.core.events), its events if its job's cancel was requested
-- Returns  {OK (0), NOT_FOUND (1) or LEASE_LOST (2: stale fence, nothing
--          changed), {prefixes to relay from (_flow.lua)}}

local p, id, fence = KEYS[1], ARGV[1], ARGV[2]
local jk, code = held_job(p, id, fence)
if not jk then return flow_reply(code) end
local err = opt(ARGV[4])
if err then err = string.sub(err, 2) end
settle_failure(p, id, jk, ARGV[3], err, ARGV[5], tonumber(ARGV[6]), opt(ARGV[7]),
  ARGV[8] == '1', clock(), ARGV[9], ARGV[10])
return flow_reply(OK)
