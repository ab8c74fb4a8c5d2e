-- submit.lua: accept one task (QUEUED now, or PENDING until its run time).
-- KEYS: lib layout with 1 queue block and 1 task block (record, result, idempotency record).
-- ARGV after the header: 1 task id, 2 task name, 3 priority, 4 band, 5 max attempts,
--   6 payload (JSON), 7 delay (ms, 0 = now), 8 expires at (ms, 0 = never), 9 timeout (s or ''),
--   10 retry policy (JSON), 11 idempotency key ('' = none), 12 payload fingerprint,
--   13 queue depth limit (0 = none)
-- Reply: {'ok', id, state, created at (ms, Redis clock)} | {'full', active} |
--        {'conflict', other id} | {'in_progress', other id} | {'duplicate', other id}
-- A task id that already has a record is the same call sent again: {'ok', id, current state,
-- its created at}, and nothing is written.
local id, name, priority, band = ARGV[ARG0 + 1], ARGV[ARG0 + 2], ARGV[ARG0 + 3], ARGV[ARG0 + 4]
local max_attempts, payload = ARGV[ARG0 + 5], ARGV[ARG0 + 6]
local delay, expires_at = tonumber(ARGV[ARG0 + 7]), ARGV[ARG0 + 8]
local timeout, retry = ARGV[ARG0 + 9], ARGV[ARG0 + 10]
local idem, fingerprint, max_depth = ARGV[ARG0 + 11], ARGV[ARG0 + 12], tonumber(ARGV[ARG0 + 13])
local tk, ik = tkey(1, 1), tkey(1, 3)

-- redis-py resends a call whose reply a dropped connection lost (Redis restarted after the
-- write). Writing again would add a second stream entry, count the task twice and reset a
-- task that already started: answer as the first call did instead.
local prior = redis.call('HMGET', tk, 'state', 'created_at')
if prior[1] then return {'ok', id, prior[1], tonumber(prior[2]) or 0} end

if idem ~= '' then
  -- The record carries its task's progress, so no other task's key is needed here.
  local rec = redis.call('HMGET', ik, 'task', 'fp', 'state')
  if rec[1] then
    if rec[2] ~= fingerprint then return {'conflict', rec[1]} end
    if rec[3] == 'processing' then return {'in_progress', rec[1]} end
    return {'duplicate', rec[1]}
  end
end

local stats = qkey(1, Q_STATS)
if max_depth > 0 then
  local active = tonumber(redis.call('HGET', stats, 'active') or '0')
  if active >= max_depth then return {'full', active} end
end

redis.call('SADD', KEYS[K_QUEUES], qname(1))
tally(stats, 'active')
count(1, 'submitted')

local fields = {'id', id, 'name', name, 'queue', qname(1), 'priority', priority,
  'band', band, 'attempt', 0, 'max_attempts', max_attempts, 'payload', payload,
  'created_at', NOW, 'expires_at', expires_at, 'timeout', timeout, 'retry', retry,
  'idem', idem, 'history', '[]', 'history_n', 0, 'delivery', '', 'run_after', NOW + delay}
local state = 'PENDING'
if delay > 0 then
  redis.call('ZADD', KEYS[K_SCHEDULE], NOW + delay, id)
else
  state = 'QUEUED'
  -- The record's last four fields become delivery = the new entry, enqueued_at = now.
  fields[#fields - 2], fields[#fields - 1] = add_entry(id, 1, band, 1, idem), 'enqueued_at'
  fields[#fields] = NOW
end
move(tk, id, 1, nil, state, fields)
emit('TASK_SUBMITTED', id, 1, state, 0, {name = name})
if idem ~= '' then
  -- No expiry while the task is unfinished (a delayed or retrying task can outlive any TTL);
  -- settle_idempotency starts IDEMPOTENCY_TTL when the task reaches a terminal state.
  redis.call('HSET', ik, 'task', id, 'fp', fingerprint, 'state', 'processing')
end
return {'ok', id, state, NOW}
