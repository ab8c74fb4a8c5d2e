-- submit.lua: accept tasks (QUEUED now, or PENDING until their run time), one or many a call.
-- KEYS: lib layout with one block per queue and one task block per task (record, result,
--   idempotency record).
-- ARGV after the header: 15 fields per task, in task-block order: 1 queue index, 2 task id,
--   3 task name, 4 priority, 5 band, 6 max attempts, 7 payload (JSON), 8 delay (ms, 0 = now),
--   9 expires at (ms, 0 = never), 10 timeout (s or ''), 11 retry policy (JSON),
--   12 idempotency key ('' = none), 13 payload fingerprint, 14 queue depth limit (0 = none),
--   15 flow-control limits (the record's 'lim', see lib.lua; '' = none)
-- Reply: the gateway's SUBMITTED fields per task (reply_submitted: kind, id, state, created):
--   'ok', id, state, created at (ms, Redis clock) |
--   'full', active, '', '' | 'conflict', other id, '', '' | 'in_progress', other id, '', '' |
--   'duplicate', other id, '', ''
-- Each task is accepted or refused on its own, as if submitted alone in this order.
-- A task id that already has a record is the same call sent again: 'ok', id, current state,
-- its created at, and nothing is written for it.
-- Resend: that is the resend case: the same answer, nothing written twice.
-- Many tasks: index writes go out once per key (lib.lua); nothing here reads them back.
BATCH = NT > 1
local out = {}
local function reply(kind, id, state, created)
  reply_submitted(out, {kind = kind, id = id, state = state, created = created})
end

local active = {}  -- queue index -> tasks counted as active, this call's included
local registered = {}

-- Accept one task, or return why not (the reply's three fields).
local function accept(ti, b)
  local qi = tonumber(ARGV[b + 1])
  local id, name, priority, band = ARGV[b + 2], ARGV[b + 3], ARGV[b + 4], ARGV[b + 5]
  local max_attempts, payload, delay = ARGV[b + 6], ARGV[b + 7], tonumber(ARGV[b + 8])
  local expires_at, timeout, retry = ARGV[b + 9], ARGV[b + 10], ARGV[b + 11]
  local idem, fingerprint, max_depth = ARGV[b + 12], ARGV[b + 13], tonumber(ARGV[b + 14])
  local lim = ARGV[b + 15]
  local tk, ik = tkey(ti, 1), tkey(ti, 3)

  -- redis-py resends a call whose reply a dropped connection lost (Redis restarted after the
  -- write). Writing again would add a second stream entry, count the task twice and reset a
  -- task that already started: answer as the first call did instead.
  local prior = redis.call('HMGET', tk, 'state', 'created_at')
  if prior[1] then return 'ok', id, prior[1], tonumber(prior[2]) or 0 end

  if idem ~= '' then
    -- The record carries its task's progress, so no other task's key is needed here.
    local rec = redis.call('HMGET', ik, 'task', 'fp', 'state')
    if rec[1] then
      if rec[2] ~= fingerprint then return 'conflict', rec[1] end
      if rec[3] == 'processing' then return 'in_progress', rec[1] end
      return 'duplicate', rec[1]
    end
  end

  local stats = qkey(qi, Q_STATS)
  if max_depth > 0 then
    if not active[qi] then active[qi] = tonumber(redis.call('HGET', stats, 'active') or '0') end
    if active[qi] >= max_depth then return 'full', active[qi] end
  end
  if active[qi] then active[qi] = active[qi] + 1 end

  if not registered[qi] then
    redis.call('SADD', KEYS[K_QUEUES], qname(qi))
    registered[qi] = true
  end
  tally(stats, 'active')
  count(qi, 'submitted')

  -- Fields left at their default (no expiry, timeout, key or history yet) are not written:
  -- every reader takes a missing field as its default.
  local fields = {'id', id, 'name', name, 'queue', qname(qi), 'priority', priority,
    'band', band, 'attempt', 0, 'max_attempts', max_attempts, 'payload', payload,
    'created_at', NOW, 'retry', retry, 'history_n', 0, 'run_after', NOW + delay}
  if expires_at ~= '0' then fields[#fields + 1], fields[#fields + 2] = 'expires_at', expires_at end
  if timeout ~= '' then fields[#fields + 1], fields[#fields + 2] = 'timeout', timeout end
  if idem ~= '' then fields[#fields + 1], fields[#fields + 2] = 'idem', idem end
  if lim ~= '' then fields[#fields + 1], fields[#fields + 2] = 'lim', lim end
  local state = 'PENDING'
  if delay > 0 then
    zset(KEYS[K_SCHEDULE], id, NOW + delay)
    fields[#fields + 1], fields[#fields + 2] = 'delivery', ''
  else
    state = 'QUEUED'
    local k = #fields
    fields[k + 1], fields[k + 2] = 'delivery', add_entry(id, qi, band, 1, idem)
    fields[k + 3], fields[k + 4] = 'enqueued_at', NOW
  end
  move(tk, id, qi, nil, state, fields)
  emit('TASK_SUBMITTED', id, qi, state, 0, {name = name})
  if idem ~= '' then
    -- No expiry while the task is unfinished (a delayed or retrying task can outlive any TTL);
    -- settle_idempotency starts IDEMPOTENCY_TTL when the task reaches a terminal state.
    redis.call('HSET', ik, 'task', id, 'fp', fingerprint, 'state', 'processing')
  end
  return 'ok', id, state, NOW
end

for ti = 1, NT do reply(accept(ti, ARG0 + (ti - 1) * 15)) end
return out
