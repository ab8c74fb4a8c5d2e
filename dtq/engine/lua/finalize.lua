-- finalize.lua: record the outcome of a batch of finished attempts, then acknowledge them.
-- KEYS: lib layout with the batch's queue blocks and one task block per outcome.
-- ARGV after the header: 1 DLQ enabled ('1'/'0'), 2 worker id,
--   then 8 fields per outcome, in task-block order: queue index, band, entry id, attempt,
--   outcome ('success' | 'retry' | 'fail' | 'cancel'), data (result JSON on success, else
--   error JSON {class, message}), attempt history entry (JSON; '' for a success, whose
--   entry the record's own fields are), retry delay (ms)
--   then lib.lua's workflow trailer (wf_args): members' final states are counted in their
--   workflows in this same call (wf_note), so the fan-in is exact
-- Reply: the gateway's DECIDED fields per outcome (reply_decided): state, the state this
--   outcome moved the task to ('' when the fence rejected it: the worker sends no signal),
--   and resent, 1 when an earlier send of this call recorded it (state: the task's state now).
-- Per outcome the writes follow the delivery rules: attempt end -> status ->
-- result / schedule / DLQ -> event -> idempotency record -> XACK (batched, last of all).
-- The attempt's concurrency slots are released here too (lib.lua's release), waking waiters.
-- Fence: applied only while the task is RUNNING at the same attempt and delivery the worker
-- claimed, so a worker that lost its lease cannot overwrite a newer attempt. An outcome
-- recorded already is this call sent again: 1, and nothing is written.
-- Resend: answered with resent = 1 and the task's state now; nothing is written twice.
-- A success appends no history entry: the record's attempt, worker, started_at and
-- finished_at are that entry (records/tasks.py adds it back), which keeps the record's
-- values short (Redis then keeps the hash as a listpack instead of converting it to a
-- hashtable, about 8 us per task).
BATCH = true  -- sorted-set writes and acknowledgements go out once per key (lib.lua)
local use_dlq, worker = ARGV[ARG0 + 1], ARGV[ARG0 + 2]
local out = {}
wf_args(ARG0 + 3 + NT * 8)

for ti = 1, NT do
  local b = ARG0 + 2 + (ti - 1) * 8
  local qi, band, eid, attempt = qindex(ARGV[b + 1]), ARGV[b + 2], ARGV[b + 3], ARGV[b + 4]
  local outcome, data, history, delay = ARGV[b + 5], ARGV[b + 6], ARGV[b + 7], ARGV[b + 8]
  local tk, rk, ik = tkey(ti, T_RECORD), tkey(ti, T_RESULT), tkey(ti, T_IDEM)
  -- The fence and what a success needs, and no more: each field read costs ~2.4 kIr (its
  -- reply to Lua) and a scan of the record (a missing one scans it whole), so the fields only
  -- a rare branch uses are read there, and the task id comes from the key (tk ends with it).
  local r = redis.call('HMGET', tk, 'state', 'delivery', 'attempt', 'lh')
  local state = r[1]
  local id = state and string.sub(tk, -22)  -- ids.py: 22 characters, at the key's end
  local fenced = state ~= 'RUNNING' or r[2] ~= eid or r[3] ~= attempt
  local resent = false
  if fenced and id then
    -- redis-py resends a call whose reply a dropped connection lost. A success of this
    -- attempt by this worker, or this very history entry (worker, times), is recorded only if
    -- this outcome was applied, so it is not a stale one.
    local seen = redis.call('HMGET', tk, 'worker', 'history')
    resent = (state == 'SUCCEEDED' and r[3] == attempt and seen[1] == worker) or
      (history ~= '' and string.find(seen[2] or '', history, 1, true))
  end
  -- The gateway passes an idempotency record's key exactly when the task has one
  -- (layout.task_block, from the key claim.lua read): settle_idempotency needs no read.
  local idem = ik ~= tk and ik or ''
  if resent then
    reply_decided(out, state, 1)
  elseif fenced then
    count(qi, 'stale')
    emit('TASK_STALE_COMPLETION_REJECTED', id or '', qi, state or 'GONE', attempt, {entry = eid})
    reply_decided(out, '', 0)
  else
    if r[4] and r[4] ~= '' then  -- the attempt's slots pass to waiters
      local f = redis.call('HMGET', tk, 'name', 'lim')
      release(tk, id, qi, f[1], f[2], r[4], nil)
    end
    local fields, decided
    if outcome == 'success' then
      -- The hot outcome, written directly: what move(RUNNING -> SUCCEEDED) writes, without
      -- its generic tables, and only what a reader needs: the lease and delivery stay as the
      -- claim wrote them (every reader of those checks the state first, and decode_record
      -- shows them empty once the task has ended; each change of a listpack's value moves its
      -- tail, ~2.5 kIr), no updated_at (decode_record: finished_at is it) nor history_n (it
      -- counts history entries, and a success has none).
      redis.call('HSET', tk, 'state', 'SUCCEEDED', 'finished_at', NOW_S)
      redis.call('PEXPIREAT', tk, retention_deadline())
      zset(qkey(qi, IX.RUNNING), id, false)
      zset(qkey(qi, IX.SUCCEEDED), id, NOW_S)
      count(qi, COUNTER.SUCCEEDED)
      tally(qi, 'active', -1)
      decided = 'SUCCEEDED'
      redis.call('SET', rk, data, 'PXAT', result_deadline())
      event_of_many('TASK_SUCCEEDED', id, qi, 'SUCCEEDED', attempt)
      settle_idempotency(tk, ik, 'completed', idem)
      wf_note(ti, id, qi, 'SUCCEEDED', data)
    else
      local more = redis.call('HMGET', tk, 'history', 'cancel', 'history_n')
      fields = history_fields(more[3], more[1], history)
      fields[#fields + 1], fields[#fields + 2] = 'lease', ''  -- the attempt holds no lease now
      if outcome == 'retry' and more[2] == '1' then
        outcome = 'cancel'  -- cancel was requested during this attempt: schedule no other
      end
      if outcome == 'retry' then
        local due = NOW + tonumber(delay)
        for _, v in ipairs({'error', data, 'delivery', '', 'run_after', due}) do
          table.insert(fields, v)
        end
        move(tk, id, qi, 'RUNNING', 'RETRYING', fields)
        decided = 'RETRYING'
        zset(KEYS[K_SCHEDULE], id, due)
        event('TASK_RETRY_SCHEDULED', id, qi, 'RETRYING', attempt, {due = due})
      elseif outcome == 'cancel' then
        for _, v in ipairs({'error', data, 'delivery', ''}) do table.insert(fields, v) end
        move(tk, id, qi, 'RUNNING', 'CANCELLED', fields)
        decided = 'CANCELLED'
        event('TASK_CANCELLED', id, qi, 'CANCELLED', attempt)
        settle_idempotency(tk, ik, 'failed', idem)
        wf_note(ti, id, qi, 'CANCELLED', data)
      else
        redis.call('HSET', tk, unpack(fields))
        dead_letter(tk, ik, id, qi, 'RUNNING', use_dlq, data)
        decided = use_dlq == '1' and 'DEAD_LETTERED' or 'FAILED'
        wf_note(ti, id, qi, decided, data)
      end
    end
    ack(qi, band, eid)
    reply_decided(out, decided, 0)
  end
end
return out
