-- reclaim.lua: take back RUNNING tasks whose lease ran out (their worker died or stalled).
-- KEYS: lib layout with the batch's queue blocks and one task block per task.
-- ARGV after the header: 1 DLQ enabled ('1'/'0'), then 2 fields per task: queue index, task id,
--   then lib.lua's workflow trailer: a member dead-lettered here is counted in its workflow
-- Reply: {requeued, dead_lettered, skipped}
-- The reclaim counts as an attempt, so a task that kills its worker every time ends in the
-- DLQ instead of looping. A task whose lease is still valid is left alone.
-- Resend: the tasks the first send took back are no longer RUNNING: sent again they are
-- skipped (the reply, only logged, counts them as skipped); no attempt is counted twice.
local use_dlq = ARGV[ARG0 + 1]
local requeued, dead, skipped = 0, 0, 0
wf_args(ARG0 + 2 + 2 * NT)

for ti = 1, NT do
  local qi, id = tonumber(ARGV[ARG0 + 2 * ti]), ARGV[ARG0 + 2 * ti + 1]
  local tk, ik = tkey(ti, T_RECORD), tkey(ti, T_IDEM)
  local r = redis.call('HMGET', tk, 'state', 'lease')
  if r[1] ~= 'RUNNING' then
    redis.call('ZREM', qkey(qi, IX.RUNNING), id)  -- left behind; nothing to reclaim
    skipped = skipped + 1
  elseif tonumber(r[2] or '0') > NOW then
    redis.call('ZADD', qkey(qi, IX.RUNNING), r[2], id)  -- renewed since the reaper looked
    skipped = skipped + 1
  elseif reclaim_lost(tk, ik, id, qi, use_dlq) == 'dead' then
    dead = dead + 1
    wf_note(ti, id, qi, use_dlq == '1' and 'DEAD_LETTERED' or 'FAILED',
      redis.call('HGET', tk, 'error'))
  else
    requeued = requeued + 1
  end
end
return {requeued, dead, skipped}
