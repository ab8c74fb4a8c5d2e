-- submit.lua: accept tasks (QUEUED now, or PENDING until their run time), one or many a call.
-- KEYS: lib layout with one block per queue and one task block per task (record, idempotency
--   record).
-- ARGV after the header: the number of shapes NS, NS shapes of 13 fields, then 3 fields per
--   task in task-block order: its shape's number, task id, payload (JSON). A shape is what
--   tasks of one bulk call mostly share, sent and prepared once: 1 queue index, 2 task name,
--   3 priority, 4 band, 5 max attempts, 6 delay (ms, 0 = now), 7 expires at (ms, 0 = never),
--   8 timeout (s or ''), 9 retry policy (JSON), 10 idempotency key ('' = none), 11 payload
--   fingerprint, 12 queue depth limit (0 = none), 13 flow-control limits (the record's 'lim',
--   see lib.lua; '' = none)
-- Reply: 'all', created at (ms, Redis clock) when every task's answer is 'ok', the id sent,
--   its shape's state (QUEUED, or PENDING when delayed) and that time (a first call, the
--   common case); else the gateway's SUBMITTED fields per task (reply_submitted: kind, id,
--   state, created): 'ok', id, state, created at |
--   'full', active, '', '' | 'conflict', other id, '', '' | 'in_progress', other id, '', '' |
--   'duplicate', other id, '', ''
-- Each task is accepted or refused on its own, as if submitted alone in this order.
-- A task id that already has a record is the same call sent again: 'ok', id, current state,
-- its created at, and nothing is written for it.
-- Resend: that is the resend case: the same answer, nothing written twice. One EXISTS over
-- every task's record tells a first call (none exists) from a resend; only then is each
-- record read (HMGET per task would cost every bulk call one command per task).
-- Record: fields at their default are not written, and every reader takes a missing one as
-- that default: priority 0, no expiry, timeout, key, limits or history yet (history_n 0),
-- updated_at and run_after = created_at (read_side/tasks.py's decode_record fills them in).
-- 'opt' is '1' when the task has any of them (expires_at, timeout, idem, lim), else '':
-- claim_entry then reads none of them. Field order: a listpack record (short values) is scanned from its
-- start for each field read or written, so the fields claim_entry and finalize.lua use come
-- first: state, delivery, attempt, band, queue, name, payload, max_attempts, retry,
-- enqueued_at (or run_after), opt, then id, created_at, priority and the optional ones;
-- the claim adds started_at, lease, worker (and take), the success finished_at.
-- A call of one shape and at least 8 tasks writes the shape's record once (KEYS[K_TEMPLATE])
-- and COPYs it to each task, which then gets its own delivery, payload and id in place (the
-- same fields, in the same order, as a record written whole); the template is deleted at the
-- end of the call.
-- Counters (what move() would count, in the queue's stats hash and the per-minute bucket,
-- (re)armed for two hours when a field is new): active; a task QUEUED at once counts once in
-- 'submitted_queued', which stands for one 'submitted' and one 'queued' (readers fold it:
-- protocol.fold_counters), a delayed one in 'submitted'. The queue joins the queue registry
-- when that field is new: a queue whose stats count a submission is registered, since
-- forget_queue.lua drops both at once (no SADD per call).
-- Depth limit: one HGET of 'active' per queue and call (submit_one.lua: the HINCRBY of
-- 'active' answers with the count, taken back when full).
-- One task (enqueue()) has a script of its own, submit_one.lua, written flat; this one serves
-- bulk calls (and a bulk call of one task). Many tasks: index, counter and event writes go out
-- once per key at the end; nothing here reads them back. Both use direct commands instead of
-- lib.lua's generic move/count/emit/zset helpers: submit is the hottest script and their
-- tables and closures are a measurable part of it (docs/performance.md). They write what
-- move() and emit() would.
local out = {}

local active = {}  -- queue index -> tasks counted as active, this call's included
local counted = {}  -- queue index -> {accepted, of them QUEUED}: HINCRBY once per field at the end
local counted_qis = {}
local index, index_keys = {}, {}  -- zset key -> {score, member, ...}: one ZADD per key
local submitted = {}  -- the shapes with accepted tasks, in order: one XADD at the end
local IX_QUEUED, IX_PENDING = IX.QUEUED, IX.PENDING

-- Records that already exist: none on a first call (the common case), so nothing is read
-- per task; a resend (or an id reused) reads each record below.
local records = {}
for ti = 1, NT do records[ti] = tkey(ti, T_RECORD) end
local resent = false
for i = 1, NT, 400 do  -- 400 keys per command (unpack has a stack limit)
  resent = resent or redis.call('EXISTS', unpack(records, i, math.min(i + 399, NT))) > 0
end

-- Each shape once: what its tasks' records, entries and events share. Keyed by its number as
-- sent, so that a task finds its shape with no tonumber() (~2 kIr).
local NS = tonumber(ARGV[ARG0 + 1])
local shapes = {}
for si = 1, NS do
  local b = ARG0 + 1 + (si - 1) * 13
  local qi, name, delay = tonumber(ARGV[b + 1]), ARGV[b + 2], ARGV[b + 6]
  local expires_at, timeout, idem, lim = ARGV[b + 7], ARGV[b + 8], ARGV[b + 10], ARGV[b + 13]
  local state = delay ~= '0' and 'PENDING' or 'QUEUED'
  -- Strings, not numbers, for redis.call: Redis formats each number argument with %.17g,
  -- whose slow path a millisecond time takes (see lib.lua's NOW_S).
  local run_after = NOW_S
  -- The record's fields after state, delivery and attempt (accept writes those): see
  -- "Record" above. A task's own values (payload, id) are set in this list per task.
  local fields = {'band', ARGV[b + 4], 'queue', qname(qi), 'name', name, 'payload', false,
    'max_attempts', ARGV[b + 5], 'retry', ARGV[b + 9], 'enqueued_at', NOW_S, 'opt', '',
    'id', false, 'created_at', NOW_S}
  if state ~= 'QUEUED' then
    run_after = string.format('%d', tonumber(NOW_S) + tonumber(delay))
    fields[13], fields[14] = 'run_after', run_after
  end
  local k = #fields
  if ARGV[b + 3] ~= '0' then fields[k + 1], fields[k + 2] = 'priority', ARGV[b + 3]; k = k + 2 end
  local plain = k  -- the optional fields follow
  if expires_at ~= '0' then fields[k + 1], fields[k + 2] = 'expires_at', expires_at; k = k + 2 end
  if timeout ~= '' then fields[k + 1], fields[k + 2] = 'timeout', timeout; k = k + 2 end
  if idem ~= '' then fields[k + 1], fields[k + 2] = 'idem', idem; k = k + 2 end
  if lim ~= '' then fields[k + 1], fields[k + 2] = 'lim', lim; k = k + 2 end
  if k > plain then fields[16] = '1' end  -- opt: the record holds an optional field
  shapes[tostring(si)] = {qi = qi, band = ARGV[b + 4], run_after = run_after, state = state,
    idem = idem, fingerprint = ARGV[b + 11], max_depth = tonumber(ARGV[b + 12]), fields = fields,
    -- its tasks' TASK_SUBMITTED event, one for all of them (lib.lua's event_of_many's form):
    -- what they share, then the ids of those accepted
    head = '{"type":"TASK_SUBMITTED","queue":"' .. qname(qi) .. '","state":"' .. state ..
      '","ts":' .. NOW_S .. ',"name":' .. cjson.encode(name), ids = {}}
end
local TASKS0 = ARG0 + 1 + NS * 13  -- task fields start at ARGV[TASKS0 + 1]

-- A call of one shape and many tasks writes its shape's record once, as a template, and
-- copies it to each task (COPY duplicates the template's listpack in one allocation), which
-- then gets only its delivery, payload and id, in place: about a fifth of a bulk task's
-- record cost, against an HSET of every field. The template is deleted before the call ends.
local TEMPLATE = NS == 1 and NT >= 8 and KEYS[K_TEMPLATE]
if TEMPLATE then
  local shape = shapes['1']
  local fields = shape.fields
  fields[8], fields[18] = '', ''
  redis.call('DEL', TEMPLATE)  -- what an earlier call's failure may have left
  redis.call('HSET', TEMPLATE, 'state', shape.state, 'delivery', '', 'attempt', '0',
    unpack(fields))
end

-- Write a task's record: a copy of the template with its own values, or every field.
local function write_record(tk, shape, state, delivery, payload, id)
  if TEMPLATE and redis.call('COPY', TEMPLATE, tk) == 1 then
    if delivery ~= '' then
      redis.call('HSET', tk, 'delivery', delivery, 'payload', payload, 'id', id)
    else
      redis.call('HSET', tk, 'payload', payload, 'id', id)
    end
    return
  end
  local fields = shape.fields
  fields[8], fields[18] = payload, id
  redis.call('HSET', tk, 'state', state, 'delivery', delivery, 'attempt', '0', unpack(fields))
end

local function add_index(key, score, member)
  local t = index[key]
  if not t then
    t = {}
    index[key] = t
    index_keys[#index_keys + 1] = key
  end
  t[#t + 1], t[#t + 2] = score, member
end

-- Accept one task, or return why not (the reply's three fields).
local function accept(ti, b)
  local shape, id, payload = shapes[ARGV[b + 1]], ARGV[b + 2], ARGV[b + 3]
  local qi, idem = shape.qi, shape.idem
  local tk, ik = records[ti], tkey(ti, T_IDEM)

  -- redis-py resends a call whose reply a dropped connection lost (Redis restarted after the
  -- write). Writing again would add a second stream entry, count the task twice and reset a
  -- task that already started: answer as the first call did instead.
  if resent then
    local prior = redis.call('HMGET', tk, 'state', 'created_at')
    if prior[1] then return 'ok', id, prior[1], prior[2] or '0' end
  end

  if idem ~= '' then
    -- The record carries its task's progress, so no other task's key is needed here.
    local rec = redis.call('HMGET', ik, 'task', 'fp', 'state')
    if rec[1] then
      if rec[2] ~= shape.fingerprint then return 'conflict', rec[1] end
      if rec[3] == 'processing' then return 'in_progress', rec[1] end
      return 'duplicate', rec[1]
    end
  end

  if shape.max_depth > 0 then
    if not active[qi] then
      active[qi] = tonumber(redis.call('HGET', qkey(qi, Q_STATS), 'active') or '0')
    end
    if active[qi] >= shape.max_depth then return 'full', active[qi] end
  end
  if active[qi] then active[qi] = active[qi] + 1 end

  local c = counted[qi]
  if not c then
    c = {0, 0}
    counted[qi] = c
    counted_qis[#counted_qis + 1] = qi
  end
  c[1] = c[1] + 1

  local state, delivery = shape.state, ''
  if state == 'PENDING' then
    add_index(KEYS[K_SCHEDULE], shape.run_after, id)
    add_index(qkey(qi, IX_PENDING), NOW_S, id)
  else
    c[2] = c[2] + 1
    add_index(qkey(qi, IX_QUEUED), NOW_S, id)
    delivery = add_entry(id, qi, shape.band, '1', idem)
  end
  write_record(tk, shape, state, delivery, payload, id)
  local ids = shape.ids
  if #ids == 0 then submitted[#submitted + 1] = shape end
  ids[#ids + 1] = id
  if idem ~= '' then
    -- No expiry while the task is unfinished (a delayed or retrying task can outlive any TTL);
    -- settle_idempotency starts IDEMPOTENCY_TTL when the task reaches a terminal state.
    redis.call('HSET', ik, 'task', id, 'fp', shape.fingerprint, 'state', 'processing')
  end
  return 'ok', id, state, NOW_S
end

-- Replies go into out only once a task's answer is not the common one ('ok', the id sent, its
-- shape's state, this call's time); the tasks before it are written then. A call of only
-- common answers replies 'all' and the time: two values instead of four per task, which cost
-- Redis the reply's table and its conversion and the client its decoding.
local all = true
for ti = 1, NT do
  local b = TASKS0 + (ti - 1) * 3
  local kind, rid, state, created = accept(ti, b)
  if all and (kind ~= 'ok' or state ~= shapes[ARGV[b + 1]].state or created ~= NOW_S) then
    all = false
    for tj = 1, ti - 1 do
      local bj = TASKS0 + (tj - 1) * 3
      reply_submitted(out, 'ok', ARGV[bj + 2], shapes[ARGV[bj + 1]].state, NOW_S)
    end
  end
  if not all then reply_submitted(out, kind, rid, state, created) end
end

if TEMPLATE then redis.call('DEL', TEMPLATE) end

for _, key in ipairs(index_keys) do
  local t = index[key]
  for i = 1, #t, 400 do  -- 200 members per command (unpack has a stack limit)
    redis.call('ZADD', key, unpack(t, i, math.min(i + 399, #t)))
  end
end
for i, shape in ipairs(submitted) do  -- every attempt is 0 (Lua 5.1's rep has no separator)
  submitted[i] = shape.head .. ',"tasks":["' .. table.concat(shape.ids, '","') ..
    '"],"attempts":[' .. string.rep('0,', #shape.ids - 1) .. '0]}'
end
if #submitted == 1 then
  redis.call('XADD', KEYS[K_EVENTS], 'MAXLEN', '~', EVENTS_MAXLEN, '*', 'e', submitted[1])
elseif #submitted > 1 then
  redis.call('XADD', KEYS[K_EVENTS], 'MAXLEN', '~', EVENTS_MAXLEN, '*', 'e',
    '[' .. table.concat(submitted, ',') .. ']')
end
for _, qi in ipairs(counted_qis) do
  local c, stats, q = counted[qi], qkey(qi, Q_STATS), qname(qi)
  local fresh, registered = false, false
  redis.call('HINCRBY', stats, 'active', c[1])
  for field, n in pairs({submitted_queued = c[2], submitted = c[1] - c[2]}) do
    if n > 0 then
      registered = redis.call('HINCRBY', stats, field, n) == n or registered
      fresh = redis.call('HINCRBY', KEYS[K_TP], q .. ':' .. field, n) == n or fresh
    end
  end
  if registered then redis.call('SADD', KEYS[K_QUEUES], q) end
  if fresh then redis.call('EXPIRE', KEYS[K_TP], 7200) end
end
if all then return {'all', NOW_S} end
return out
