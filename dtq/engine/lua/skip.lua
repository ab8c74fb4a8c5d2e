-- skip.lua: drop attempts whose handler never started because the worker found their lease
-- gone (run out by its own clock, or reported lost by a renewal) or stopped before it reached
-- them (claimed ahead of a free slot); give back those still ours.
-- KEYS: lib layout with the batch's queue blocks and one task block per attempt.
-- ARGV after the header: 1 worker id,
--   then 6 fields per attempt, in task-block order: queue index, band, entry id, attempt,
--   reason ('lease_expired' | 'lease_lost' | 'worker_stopping'), skip entry (JSON {attempt, worker, entry, reason,
--   at}) appended to the record's 'skips' list
-- Reply: one integer per attempt: 1 given back, 0 no longer ours (reclaimed, finished or gone:
--   only recorded), 2 recorded already (this call sent again).
-- Resend: answered 2 per attempt recorded by the first send; nothing written twice.
-- Given back: the task is QUEUED again on a fresh delivery, and its attempt counter goes back
-- by one, since the handler never ran: the next claim runs the same attempt number. A task
-- that was reclaimed meanwhile keeps its 'lost' attempt; the skip only adds the record.
local MAX_SKIPS = 20
local worker = ARGV[ARG0 + 1]
local out = {}

local function already(list, eid, attempt)
  for _, s in ipairs(list) do
    if s.entry == eid and s.worker == worker and tostring(s.attempt) == attempt then
      return true
    end
  end
  return false
end

for ti = 1, NT do
  local b = ARG0 + 1 + (ti - 1) * 6
  local qi, band, eid, attempt = tonumber(ARGV[b + 1]), ARGV[b + 2], ARGV[b + 3], ARGV[b + 4]
  local reason, entry = ARGV[b + 5], ARGV[b + 6]
  local tk = tkey(ti, T_RECORD)
  local r = redis.call('HMGET', tk, 'id', 'state', 'delivery', 'attempt', 'skips', 'name', 'lim',
    'lh')
  local id = r[1]
  local list = {}
  if r[5] and r[5] ~= '' then list = cjson.decode(r[5]) end
  if id and already(list, eid, attempt) then
    table.insert(out, 2)
  else
    table.insert(list, cjson.decode(entry))
    while #list > MAX_SKIPS do table.remove(list, 1) end
    local skips = cjson.encode(list)
    local extra = {worker = worker, reason = reason, entry = eid}
    if id and r[2] == 'RUNNING' and r[3] == eid and r[4] == attempt then
      redis.call('HDEL', tk, 'lease')
      release(tk, id, qi, r[6], r[7], r[8], nil)  -- the next claim asks for slots again
      ack(qi, band, eid)
      deliver(tk, id, qi, band, tonumber(attempt))
      move(tk, id, qi, 'RUNNING', 'QUEUED', {'attempt', tonumber(attempt) - 1, 'skips', skips})
      extra.given_back = true
      emit('TASK_START_SKIPPED', id, qi, 'QUEUED', attempt, extra)
      table.insert(out, 1)
    else
      if id then redis.call('HSET', tk, 'skips', skips) end
      extra.given_back = false
      emit('TASK_START_SKIPPED', id or '', qi, r[2] or 'GONE', attempt, extra)
      table.insert(out, 0)
    end
    count(qi, 'start_skipped')
  end
end
return out
