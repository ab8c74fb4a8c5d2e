-- periodic_commit.lua: record the decision on a claimed (schedule, slot) and release it.
-- Standalone (no lib.lua layout). KEYS[1] the schedule's state (hash), KEYS[2] its log (list).
-- ARGV: 1 owner, 2 slot (epoch ms), 3 decision ('fired' | 'skipped' | 'buffered'),
--   4 task id ('' unless fired), 5 log length cap, 6.. log entries (JSON), oldest first
-- Resend: answered {'done'}, nothing written twice.
-- Reply: {'ok'} | {'done'} (already decided: a resend, or another scheduler took over) |
--        {'lost', owner} (our claim was taken over: its new owner decides)
local owner, slot, decision, task = ARGV[1], tonumber(ARGV[2]), ARGV[3], ARGV[4]
local s = redis.call('HMGET', KEYS[1], 'cursor', 'buffered', 'owner', 'slot')
local cursor, buffered = tonumber(s[1] or '0'), tonumber(s[2] or '-1')
if slot <= cursor and buffered ~= slot then return {'done'} end
if s[3] ~= owner or tonumber(s[4]) ~= slot then return {'lost', s[3] or ''} end
if slot > cursor then redis.call('HSET', KEYS[1], 'cursor', ARGV[2]) end
redis.call('HDEL', KEYS[1], 'owner', 'slot', 'until')
if decision == 'buffered' then
  redis.call('HSET', KEYS[1], 'buffered', ARGV[2])
elseif buffered == slot then
  redis.call('HDEL', KEYS[1], 'buffered')
end
if decision == 'fired' then redis.call('HSET', KEYS[1], 'last_task', task, 'last_slot', ARGV[2]) end
for i = 6, #ARGV do redis.call('LPUSH', KEYS[2], ARGV[i]) end
redis.call('LTRIM', KEYS[2], 0, tonumber(ARGV[5]) - 1)
return {'ok'}
