-- submit_one.lua: accept one task (enqueue()): what submit.lua does for a call of one task,
-- with keys and arguments of its own and written flat, so that the hottest call costs Redis
-- as little as it can: no ARGV header or queue and task blocks (each argument ~1 kIr), none
-- of lib.lua's per-call prelude, no TIME, no table but the reply and the record's fields.
-- KEYS (gateway.submit_one_call): 1 task record (its key ends with the task id), 2 queue
--   stats, 3 the task's stream (its queue and band) or, delayed, the schedule, 4 the queue's
--   QUEUED index or, delayed, its PENDING index, 5 events, 6 throughput bucket, 7 queue
--   registry, 8 idempotency record (only with a key)
-- ARGV: 1 payload (JSON), 2 task name, 3 queue, 4 band, 5 max attempts, 6 retry policy
--   (JSON), 7 event stream max length, then name, value pairs only for what a task has (an
--   argument costs Redis ~1.2 kIr: most tasks have none of these): 'priority' (missing: 0),
--   'delay' (ms; missing: now), 'depth' (the queue's depth limit; missing: none), 'idem' and
--   'fp' (idempotency key, payload fingerprint), and the record's optional fields
--   (expires_at, timeout, lim)
-- Reply: the gateway's SUBMITTED fields (reply_submitted), as submit.lua's for its one task.
-- Resend: as submit.lua: a record that exists is this call sent again (or an id reused):
-- its state and created at are the answer, and nothing is written.
-- The time: a task queued now takes Redis' clock from its stream entry's id (the ms part,
-- never behind the stream's last entry); a delayed one asks TIME.
-- Record, counters, registry and depth limit: as submit.lua's header says.
-- Numbers go to redis.call as strings ('1'): Redis formats a Lua number argument with
-- snprintf('%.17g'), ~2 kIr each (lib.lua's NOW_S).
local out = {}
local rk, stats = KEYS[1], KEYS[2]
local id = string.sub(rk, -22)  -- ids.py: 22 characters, at the key's end
if redis.call('EXISTS', rk) == 1 then
  local prior = redis.call('HMGET', rk, 'state', 'created_at')
  if prior[1] then
    reply_submitted(out, 'ok', id, prior[1], prior[2] or '0')
    return out
  end
end
local delay, depth, idem, fp, priority = '0', '0', '', '', nil
local more = {}  -- the record's optional fields
for i = 8, #ARGV, 2 do
  local name, value = ARGV[i], ARGV[i + 1]
  if name == 'delay' then
    delay = value
  elseif name == 'depth' then
    depth = value
  elseif name == 'idem' then
    idem = value
  elseif name == 'fp' then
    fp = value
  elseif name == 'priority' then
    priority = value
  else
    more[#more + 1], more[#more + 2] = name, value
  end
end
if idem ~= '' then
  -- The record carries its task's progress, so no other task's key is needed here.
  local rec = redis.call('HMGET', KEYS[8], 'task', 'fp', 'state')
  if rec[1] then
    local kind = 'duplicate'
    if rec[2] ~= fp then
      kind = 'conflict'
    elseif rec[3] == 'processing' then
      kind = 'in_progress'
    end
    reply_submitted(out, kind, rec[1], '', '')
    return out
  end
end
local active = redis.call('HINCRBY', stats, 'active', '1')
if depth ~= '0' and active > tonumber(depth) then
  redis.call('HINCRBY', stats, 'active', '-1')
  reply_submitted(out, 'full', active - 1, '', '')
  return out
end

local q, now, state, counted = ARGV[3], nil, 'QUEUED', 'submitted_queued'
-- The record, in submit.lua's order (see there): its 2nd value (state), 4th (delivery), the
-- 20th and 26th (times) are set below.
local f = {'state', state, 'delivery', '', 'attempt', '0', 'band', ARGV[4], 'queue', q,
  'name', ARGV[2], 'payload', ARGV[1], 'max_attempts', ARGV[5], 'retry', ARGV[6],
  'enqueued_at', '', 'opt', (#more > 0 or idem ~= '') and '1' or '', 'id', id,
  'created_at', ''}
if delay == '0' then
  local eid
  if idem ~= '' then
    eid = redis.call('XADD', KEYS[3], '*', 't', id, 'a', '1', 'i', idem)
  else
    eid = redis.call('XADD', KEYS[3], '*', 't', id, 'a', '1')
  end
  now = string.sub(eid, 1, string.find(eid, '-', 1, true) - 1)
  f[4], f[20], f[26] = eid, now, now
  redis.call('ZADD', KEYS[4], now, id)
else
  local time = redis.call('TIME')
  now = time[1] .. string.sub('00000' .. time[2], -6, -4)  -- ms digits, no formatting
  local due = string.format('%d', tonumber(now) + tonumber(delay))
  state, counted = 'PENDING', 'submitted'
  f[2], f[19], f[20], f[26] = state, 'run_after', due, now
  redis.call('ZADD', KEYS[3], due, id)
  redis.call('ZADD', KEYS[4], now, id)
end
local k = 26
if priority then f[27], f[28], k = 'priority', priority, 28 end  -- a missing one is 0
for i = 1, #more do
  k = k + 1
  f[k] = more[i]
end
if idem ~= '' then f[k + 1], f[k + 2] = 'idem', idem end
redis.call('HSET', rk, unpack(f))
redis.call('XADD', KEYS[5], 'MAXLEN', '~', ARGV[7], '*', 'e',
  '{"type":"TASK_SUBMITTED","task":"' .. id .. '","queue":"' .. q .. '","state":"' .. state ..
  '","attempt":0,"ts":' .. now .. ',"name":' .. cjson.encode(ARGV[2]) .. '}')
if idem ~= '' then
  -- No expiry while the task is unfinished (a delayed or retrying task can outlive any TTL);
  -- settle_idempotency starts IDEMPOTENCY_TTL when the task reaches a terminal state.
  redis.call('HSET', KEYS[8], 'task', id, 'fp', fp, 'state', 'processing')
end
if redis.call('HINCRBY', stats, counted, '1') == 1 then redis.call('SADD', KEYS[7], q) end
if redis.call('HINCRBY', KEYS[6], q .. ':' .. counted, '1') == 1 then
  redis.call('EXPIRE', KEYS[6], '7200')
end
reply_submitted(out, 'ok', id, state, now)
return out
