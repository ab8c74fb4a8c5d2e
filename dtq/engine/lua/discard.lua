-- discard.lua: remove entries from a queue's DLQ for good (discard, DLQ purge).
-- KEYS: lib layout with the DLQ's queue block, then one task block per entry: record, result,
--   idempotency record.
-- ARGV after the header: 1 reason, then 1 field per task block: DLQ entry id
-- Reply: one status per entry: 'discarded' | 'done' (no such entry any more: the record says
--   it was discarded already, by this call sent again or an earlier discard) | 'gone' (no
--   such entry)
-- Resend: the record keeps the discarded entry's id (discarded_entry), so the same call sent
-- again answers 'done' and writes nothing (a record already expired cannot tell: 'gone').
-- The task record, when it still exists, stays DEAD_LETTERED until retention removes it, with
-- its `dlq` field cleared and `discarded_at` set; its idempotency key is released so the
-- same key can be submitted again.
local reason = ARGV[ARG0 + 1]
local out = {}

for ti = 1, NT do
  local eid = ARGV[ARG0 + 1 + ti]
  local tk, ik = tkey(ti, T_RECORD), tkey(ti, T_IDEM)
  local e = redis.call('XRANGE', qkey(1, Q_DLQ), eid, eid)
  if #e == 0 then
    table.insert(out, redis.call('HGET', tk, 'discarded_entry') == eid and 'done' or 'gone')
  else
    local id = ''
    for i = 1, #e[1][2], 2 do if e[1][2][i] == 't' then id = e[1][2][i + 1] end end
    redis.call('XDEL', qkey(1, Q_DLQ), eid)
    dlq_unindex(id, 1, eid)
    local r = redis.call('HMGET', tk, 'id', 'dlq', 'state', 'attempt')
    if r[1] and r[2] == eid then
      redis.call('HSET', tk, 'dlq', '', 'discarded_at', NOW, 'discarded_entry', eid)
    end
    -- Release the key only while it still names this task (it may have been reused).
    if ik ~= tk and redis.call('HGET', ik, 'task') == id and (not r[1] or r[2] == eid) then
      redis.call('DEL', ik)
    end
    count(1, 'discarded')
    emit('TASK_DISCARDED', id, 1, r[3] or 'GONE', r[4], {entry = eid, reason = reason})
    table.insert(out, 'discarded')
  end
end
return out
