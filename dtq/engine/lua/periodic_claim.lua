-- periodic_claim.lua: claim one (schedule, slot) for a while, before firing or skipping it.
-- Standalone (no lib.lua layout). KEYS[1] the schedule's state (hash).
-- ARGV: 1 owner (scheduler process id), 2 slot (epoch ms), 3 lease (ms)
-- Reply: {'ok', now ms} | {'done', cursor} | {'busy', owner} | {'paused'}
-- The state's cursor is the last slot decided (fired or skipped); a slot is open if it is
-- after the cursor, or it is the one buffered slot.
-- Resend: a resend of a claim we hold renews it ('ok').
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local owner, slot, lease = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local s = redis.call('HMGET', KEYS[1], 'cursor', 'buffered', 'owner', 'until', 'paused')
if s[5] == '1' then return {'paused'} end
local cursor = tonumber(s[1] or '0')
if slot <= cursor and tonumber(s[2] or '-1') ~= slot then return {'done', cursor} end
if s[3] and s[3] ~= owner and tonumber(s[4] or '0') > now then return {'busy', s[3]} end
redis.call('HSET', KEYS[1], 'owner', owner, 'slot', ARGV[2], 'until', now + lease)
return {'ok', now}
