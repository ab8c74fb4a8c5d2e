-- pause.lua: pause or resume one queue (read.lua reads nothing from a paused queue).
-- KEYS: lib layout with the queue's block (no task blocks).
-- ARGV after the header: 1 '1' pause | '0' resume, 2 reason
-- Reply: 1 when the queue's state changed, 0 when it already was paused / running.
-- Submissions stay accepted while a queue is paused; only reading stops.
local pause, reason = ARGV[ARG0 + 1] == '1', ARGV[ARG0 + 2]
local changed
if pause then
  changed = redis.call('SADD', KEYS[K_PAUSED], qname(1))
  redis.call('SADD', KEYS[K_QUEUES], qname(1))
else
  changed = redis.call('SREM', KEYS[K_PAUSED], qname(1))
end
if changed == 1 then
  emit(pause and 'QUEUE_PAUSED' or 'QUEUE_RESUMED', '', 1, '', 0, {reason = reason})
end
return changed
