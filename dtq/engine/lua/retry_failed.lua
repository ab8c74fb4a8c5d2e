-- retry_failed.lua: put FAILED tasks (ended without a DLQ entry, as with DLQ_ENABLED off) back
--   on a queue, attempts from 1, optionally with edited arguments and priority.
-- KEYS: lib layout with the tasks' queue block and the target queue's block (one block when
--   they are the same), then one task block per task: record, result, idempotency record
--   (under the task's queue).
-- ARGV after the header: 1 source queue index, 2 target queue index, then 2 fields per task
--   block: the record's finished_at as the caller read it (the fence: the failure this retry
--   answers), and an edit: '' for none, else JSON {payload (the encoded payload string),
--   priority, band} written onto the record before its delivery
-- Reply: one status per task: 'retried' | 'missing' (no record: retention removed it) |
--   'stale' (no longer FAILED at that finished_at in the source queue: nothing changed)
-- Resend: a retry writes its fence into the record's retry_of field, so the same call sent
-- again (after a lost reply) finds it there and answers 'retried' without a second delivery
-- or a second edit, even when the new run has already failed again (that failure has a later
-- finished_at, which only a new call names).
local src, dst = tonumber(ARGV[ARG0 + 1]), tonumber(ARGV[ARG0 + 2])
local out = {}

-- The idempotency record follows the task when it stays in its queue and the key still names
-- it; otherwise the key is released (or left to the task that took it) and the record
-- forgets it, so the new run never settles another task's key.
local function reopen_idempotency(tk, ik, id)
  local key = redis.call('HGET', tk, 'idem')
  if not key or key == '' or ik == tk then return end
  local ours = redis.call('HGET', ik, 'task') == id
  if ours and src == dst then
    redis.call('HSET', ik, 'state', 'processing')
    redis.call('EXPIRE', ik, IDEM_TTL)
    return
  end
  if ours then redis.call('DEL', ik) end
  redis.call('HSET', tk, 'idem', '')
end

local function retry(tk, ik, id, fence, attempts, edit)
  redis.call('HDEL', tk, 'finished_at', 'cancel', 'cancel_reason', 'lease', 'worker', 'progress')
  redis.call('PERSIST', tk)  -- it had the retention TTL of a terminal record
  redis.call('ZREM', qkey(src, IX.FAILED), id)
  reopen_idempotency(tk, ik, id)
  if edit ~= '' then
    local e = cjson.decode(edit)
    redis.call('HSET', tk, 'payload', e.payload, 'priority', e.priority, 'band', e.band)
  end
  redis.call('HSET', tk, 'queue', qname(dst), 'attempt', 0, 'expires_at', 0, 'retry_of', fence,
    'retried_at', NOW)
  add_history(tk, cjson.encode({outcome = 'retried', at = NOW / 1000, from_queue = qname(src),
    queue = qname(dst), attempts = tonumber(attempts)}))
  redis.call('SADD', KEYS[K_QUEUES], qname(dst))
  redis.call('HINCRBY', qkey(dst, Q_STATS), 'active', 1)
  count(dst, 'replayed')
  deliver(tk, id, dst, redis.call('HGET', tk, 'band'), 1)
  move(tk, id, dst, nil, 'QUEUED')
  emit('TASK_RETRIED', id, dst, 'QUEUED', 0, {from_queue = qname(src)})
end

for ti = 1, NT do
  local b = ARG0 + 2 + (ti - 1) * 2
  local fence, edit = ARGV[b + 1], ARGV[b + 2]
  local tk, ik = tkey(ti, T_RECORD), tkey(ti, T_IDEM)
  local r = redis.call('HMGET', tk, 'id', 'state', 'finished_at', 'queue', 'retry_of', 'attempt')
  if not r[1] then
    table.insert(out, 'missing')
  elseif r[5] == fence then
    table.insert(out, 'retried')  -- this very call, received again
  elseif r[2] == 'FAILED' and r[3] == fence and r[4] == qname(src) and fence ~= '' then
    retry(tk, ik, r[1], fence, r[6], edit)
    table.insert(out, 'retried')
  else
    table.insert(out, 'stale')
  end
end
return out
