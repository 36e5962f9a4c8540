-- apply: the messages of other slots' outboxes to this one's steps and
-- workflows (_flow.lua says what they are); idempotent and order-safe, so a
-- relay may run twice, or late. The cascade they start runs here; what it
-- sends to other slots goes to this slot's outbox.
--
-- KEYS[1]  the queue's key prefix (every message's p)
-- ARGV     the messages, JSON
-- Returns  {how many, {prefixes to relay from}}

local p = KEYS[1]
for _, m in ipairs(ARGV) do flow_send(p, cjson.decode(m)) end
flow_run(p)
return flow_reply(#ARGV)
