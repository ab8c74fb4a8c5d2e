-- pause.lua: pause or resume one queue (read.lua reads nothing from a paused queue).
-- KEYS: lib layout with the queue's block (no task blocks).
-- ARGV after the header: 1 '1' pause | '0' resume, 2 reason, 3 token of this request
-- Reply: 1 when the queue's state changed, 0 when it already was paused / running.
-- Resend: the queue's stats hash keeps the token of the last change, so the same call sent
-- again answers 1 (it changed the state) and writes nothing.
-- Submissions stay accepted while a queue is paused; only reading stops.
local pause, reason, token = ARGV[ARG0 + 1] == '1', ARGV[ARG0 + 2], ARGV[ARG0 + 3]
local changed
if pause then
  changed = redis.call('SADD', KEYS[K_PAUSED], qname(1))
  redis.call('SADD', KEYS[K_QUEUES], qname(1))
else
  changed = redis.call('SREM', KEYS[K_PAUSED], qname(1))
end
if changed == 1 then
  redis.call('HSET', qkey(1, Q_STATS), 'pause_token', token)
  emit(pause and 'QUEUE_PAUSED' or 'QUEUE_RESUMED', '', 1, '', 0, {reason = reason})
elseif redis.call('HGET', qkey(1, Q_STATS), 'pause_token') == token then
  changed = 1
end
return changed
