-- forget_queue.lua: forget a queue that holds nothing any more: drop it from the queue
-- registry, with its counters and its empty streams. The caller only asks for queues that
-- are not declared; this script checks, atomically, that nothing is left to lose.
-- KEYS: lib layout with the queue's block (no task blocks).
-- ARGV after the header: none
-- Reply: 1 forgotten (or already gone), 0 kept: it is paused, a state index or the DLQ still
--   holds something (finished tasks stay indexed for RETENTION, so a queue is forgotten only
--   once its last task passed retention), a stream has entries, or a worker reads a stream.
-- Resend: a queue forgotten already answers 1 again and writes nothing.
local queue = qname(1)
if redis.call('SISMEMBER', KEYS[K_PAUSED], queue) == 1 then return 0 end
for i = 1, 9 do
  if redis.call('ZCARD', qkey(1, i)) > 0 then return 0 end
end
if redis.call('XLEN', qkey(1, Q_DLQ)) > 0 then return 0 end
for band = 0, 2 do
  local s = stream_key(1, band)
  if redis.call('XLEN', s) > 0 then return 0 end
  local ok, groups = pcall(redis.call, 'XINFO', 'GROUPS', s)
  if ok then
    for _, group in ipairs(groups) do
      -- Each group is a flat list of name, value pairs; a consumer is a worker reading it.
      for i = 1, #group, 2 do
        if group[i] == 'consumers' and tonumber(group[i + 1]) > 0 then return 0 end
      end
    end
  end
end
if redis.call('SREM', KEYS[K_QUEUES], queue) == 0 then return 1 end
redis.call('DEL', qkey(1, Q_STATS), qkey(1, Q_DLQ), stream_key(1, 0), stream_key(1, 1),
  stream_key(1, 2), qkey(1, Q_LIMITS), qkey(1, Q_HELD), qkey(1, Q_WAIT), qkey(1, Q_RATE))
emit('QUEUE_FORGOTTEN', '', 1, '', 0)
return 1
