-- workflow_sync.lua: count members' final states in their workflow (the fan-in backstop), then
-- say when the workflow should next be looked at.
-- KEYS: lib layout with the members' queue blocks and one task block per member (record,
--   result, idempotency record), then one workflow block (lib.lua: hash, ready set, due set).
-- ARGV after the header: 1 due score the caller read ('' = leave the due entry alone),
--   2 next look (ms from now; -1 = never: the workflow needs nothing more), then 3 fields
--   per task block: queue index, task id, error JSON for a member whose submission was
--   refused ('' = none: a missing record then means purged), then lib.lua's workflow
--   trailer (one workflow)
-- Reply: {workflow state, members ready to submit, 1 if the due entry was rescheduled/removed}
-- Resend: a member counted already is not counted again (wf_note's guard), so a second call
-- of the same arguments (after a lost reply) changes nothing but the due entry, which it
-- moves only while it still holds the score the caller read: a member finished since then
-- keeps its workflow due now. A member whose record is gone (purged) counts as EXPIRED, one
-- whose submission was refused as FAILED.
local seen, next_ms = ARGV[ARG0 + 1], tonumber(ARGV[ARG0 + 2])
wf_args(ARG0 + 3 + 3 * NT)
for ti = 1, NT do
  local b = ARG0 + 2 + 3 * (ti - 1)
  local qi, id, refused = tonumber(ARGV[b + 1]), ARGV[b + 2], ARGV[b + 3]
  local r = redis.call('HMGET', tkey(ti, T_RECORD), 'id', 'state', 'error')
  if not r[1] and refused ~= '' then
    wf_note(ti, id, qi, 'FAILED', refused)  -- its arguments were refused (too large...)
  elseif not r[1] then
    wf_note(ti, id, qi, 'EXPIRED', cjson.encode({class = 'dtq.TaskGone',
      message = 'the task record is gone (purged or past retention)'}))
  elseif TERMINAL[r[2]] then
    local data = r[3]
    if r[2] == 'SUCCEEDED' then data = redis.call('GET', tkey(ti, T_RESULT)) end
    wf_note(ti, r[1], qi, r[2], data)
  end
end
local wk, due, wid = wkey(1, 1), wkey(1, 3), wf_ids[1]
local state = redis.call('HGET', wk, 'state')
local ready = redis.call('SCARD', wkey(1, 2))
local moved = 0
local score = redis.call('ZSCORE', due, wid)
if not state then
  redis.call('ZREM', due, wid)  -- the workflow expired
  return {'GONE', 0, 1}
end
if ready == 0 and seen ~= '' and tonumber(score) == tonumber(seen) then
  if next_ms < 0 then
    redis.call('ZREM', due, wid)
  else
    redis.call('ZADD', due, NOW + next_ms, wid)
  end
  moved = 1
end
return {state, ready, moved}
