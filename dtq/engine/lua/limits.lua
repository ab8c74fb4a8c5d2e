-- limits.lua: set or clear a queue's own flow-control limits, then wake the waiters the new
-- concurrency limit has room for (all of them when it was cleared), a bounded number a call.
-- KEYS: lib layout with the queue's block (no task blocks).
-- ARGV after the header: 1 max concurrency ('' = none), 2 rate ("<count>|<period ms>|<burst>",
--   '' = none), 3 '1' to change the limits, '0' only to wake (a follow-up call)
-- Reply: {waiters of the queue's own concurrency limit still waiting, slots of it held}
-- Resend: the values are already there, so nothing changes and no event is written again;
-- a woken waiter is no longer in the line, so nobody is woken twice.
local lim = qkey(1, Q_LIMITS)
if ARGV[ARG0 + 3] == '1' then
  local names = {'max_concurrency', 'rate'}
  local now = redis.call('HMGET', lim, unpack(names))
  local changed = false
  for i, name in ipairs(names) do
    local value = ARGV[ARG0 + i]
    if (now[i] or '') ~= value then
      changed = true
      if value == '' then redis.call('HDEL', lim, name) else redis.call('HSET', lim, name, value) end
    end
  end
  if changed then
    emit('QUEUE_LIMITS_CHANGED', '', 1, '', 0,
      {max_concurrency = ARGV[ARG0 + 1], rate = ARGV[ARG0 + 2]})
  end
end
local max = tonumber(ARGV[ARG0 + 1])
for _ = 1, 64 do
  if not first_waiter(1, 'cq') then break end
  if max and held_count(1, 'cq') >= max then break end
  wake(1, 'cq', max)
end
local waiting = redis.call('ZLEXCOUNT', qkey(1, Q_WAIT), '[cq\0', '(cq\1')
return {waiting, held_count(1, 'cq')}
