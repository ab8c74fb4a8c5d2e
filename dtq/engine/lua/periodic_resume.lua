-- periodic_resume.lua: resume a paused schedule; the slots it missed while paused are skipped.
-- Standalone (no lib.lua layout). KEYS[1] the schedule's state (hash), KEYS[2] its log (list).
-- ARGV: 1 log length cap, 2 reason, 3 token of this request
-- Reply: 1 if it was paused (and is resumed now), 0 if not
-- Resend: the state keeps the token of the last resume (resume_token), so the same call sent
-- again answers 1, like the first, and writes nothing.
local r = redis.call('HMGET', KEYS[1], 'paused', 'resume_token')
if r[1] ~= '1' then return r[2] == ARGV[3] and 1 or 0 end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local cursor = tonumber(redis.call('HGET', KEYS[1], 'cursor') or '0')
redis.call('HDEL', KEYS[1], 'paused', 'buffered')
redis.call('HSET', KEYS[1], 'resume_token', ARGV[3])
if cursor < now then
  -- From now on slots fire again; the ones of the pause are not caught up.
  redis.call('HSET', KEYS[1], 'cursor', string.format('%d', now))
  redis.call('LPUSH', KEYS[2], cjson.encode({slot = now, from = cursor, outcome = 'skipped',
    reason = 'paused' .. (ARGV[2] ~= '' and (': ' .. ARGV[2]) or ''), at = now}))
  redis.call('LTRIM', KEYS[2], 0, tonumber(ARGV[1]) - 1)
end
return 1
