-- replay.lua: put dead-lettered tasks back on a queue, each from its DLQ entry.
-- KEYS: lib layout with the DLQ's queue block and the target queue's block (one block when
--   they are the same), then one task block per entry: record, result, idempotency record
--   (under the DLQ's queue).
-- ARGV after the header: 1 DLQ queue index, 2 target queue index,
--   3 max attempts for entries that lack it, then 1 field per task block: DLQ entry id,
--   then optionally 1 field per task block: an edit, '' for none, else JSON {payload (the
--   encoded payload string), priority, band} written onto the record before its delivery
-- Reply: one status per entry: 'replayed' (record reused) | 'recreated' (the record had
--   expired: a fresh one with the same id was built from the entry) | 'done' (no such entry
--   any more because it was replayed already: this call sent again after a lost reply, or an
--   earlier replay; nothing changed) | 'gone' (no such entry: discarded or trimmed) |
--   'stale' (the record no longer matches the entry; nothing changed)
-- Resend: taking the entry out of the DLQ happens in the same script as the new delivery,
-- so two replays of one entry create one new run and apply an edit once; the second finds
-- the entry gone and the record's replayed_entry naming it, and answers 'done'.
-- Attempts restart at 1; the history is kept.
local src, dst = tonumber(ARGV[ARG0 + 1]), tonumber(ARGV[ARG0 + 2])
local default_max = ARGV[ARG0 + 3]
local out = {}

local function entry_fields(eid)
  local e = redis.call('XRANGE', qkey(src, Q_DLQ), eid, eid)
  if #e == 0 then return nil end
  local f = {}
  for i = 1, #e[1][2], 2 do f[e[1][2][i]] = e[1][2][i + 1] end
  return f
end

-- The idempotency record follows the task when it stays in its queue; a task replayed into
-- another queue is no longer that queue's task for the key, so the key is released.
local function reopen_idempotency(tk, ik, id)
  local key = redis.call('HGET', tk, 'idem')
  if not key or key == '' or ik == tk or redis.call('HGET', ik, 'task') ~= id then return end
  if src == dst then
    redis.call('HSET', ik, 'state', 'processing')
    redis.call('EXPIRE', ik, IDEM_TTL)
  else
    redis.call('DEL', ik)
    redis.call('HSET', tk, 'idem', '')
  end
end

local function reuse(tk, ik, id)
  redis.call('HDEL', tk, 'finished_at', 'cancel', 'cancel_reason', 'lease', 'worker', 'progress',
    'discarded_at')
  redis.call('PERSIST', tk)  -- it had the retention TTL of a terminal record
  redis.call('ZREM', qkey(src, IX.DEAD_LETTERED), id)
  reopen_idempotency(tk, ik, id)
end

local function rebuild(tk, id, f)
  redis.call('HSET', tk, 'id', id, 'name', f.name, 'priority', f.priority or 0,
    'band', f.band or 1, 'max_attempts', f.max_attempts or default_max, 'payload', f.payload,
    'created_at', f.created_at or NOW, 'timeout', f.timeout or '', 'retry', f.retry or '{}',
    'idem', '', 'error', f.error or '', 'history', '[]', 'history_n', 0)
  redis.call('ZREM', qkey(src, IX.DEAD_LETTERED), id)
end

for ti = 1, NT do
  local eid = ARGV[ARG0 + 3 + ti]
  local tk, ik = tkey(ti, T_RECORD), tkey(ti, T_IDEM)
  local f = entry_fields(eid)
  if not f then
    local replayed = redis.call('HGET', tk, 'replayed_entry') == eid
    table.insert(out, replayed and 'done' or 'gone')
  else
    local id = f.t
    local r = redis.call('HMGET', tk, 'id', 'state', 'dlq', 'band', 'attempt')
    local status
    if not r[1] then
      rebuild(tk, id, f)
      status = 'recreated'
    elseif r[2] == 'DEAD_LETTERED' and r[3] == eid then
      reuse(tk, ik, id)
      status = 'replayed'
    end
    if status then
      local edit = ARGV[ARG0 + 3 + NT + ti]
      if edit and edit ~= '' then
        local e = cjson.decode(edit)
        redis.call('HSET', tk, 'payload', e.payload, 'priority', e.priority, 'band', e.band)
      end
      redis.call('XDEL', qkey(src, Q_DLQ), eid)
      dlq_unindex(id, src, eid)
      redis.call('HSET', tk, 'queue', qname(dst), 'attempt', 0, 'expires_at', 0, 'dlq', '',
        'replayed_at', NOW, 'replayed_entry', eid)
      redis.call('HINCRBY', tk, 'replays', 1)
      add_history(tk, cjson.encode({outcome = 'replayed', at = NOW / 1000, entry = eid,
        from_queue = qname(src), queue = qname(dst), attempts = tonumber(f.attempts)}))
      redis.call('SADD', KEYS[K_QUEUES], qname(dst))
      redis.call('HINCRBY', qkey(dst, Q_STATS), 'active', 1)
      count(dst, 'replayed')
      deliver(tk, id, dst, redis.call('HGET', tk, 'band'), 1)
      move(tk, id, dst, nil, 'QUEUED')
      emit('TASK_REPLAYED', id, dst, 'QUEUED', 0, {entry = eid, from_queue = qname(src)})
    else
      status = 'stale'
    end
    table.insert(out, status)
  end
end
return out
