-- promote.lua: move due scheduled tasks (PENDING, RETRYING) onto their queue streams.
-- KEYS: lib layout with the batch's queue blocks and one task block per task.
-- ARGV after the header: 2 fields per task, in task-block order: queue index, task id
-- Reply: {promoted, expired, dropped}
-- Removal from the schedule and the new stream entry happen in this one script, so any
-- number of schedulers can run: a member is promoted once, and a task that is no longer
-- waiting (cancelled, finished) is only dropped from the schedule.
-- Resend: the members the first send promoted left the schedule: sent again, nothing
-- happens and nothing is counted.
local promoted, expired, dropped = 0, 0, 0

for ti = 1, NT do
  local qi, id = tonumber(ARGV[ARG0 + 2 * ti - 1]), ARGV[ARG0 + 2 * ti]
  local tk, ik = tkey(ti, T_RECORD), tkey(ti, T_IDEM)
  local r = redis.call('HMGET', tk, 'state', 'band', 'attempt', 'expires_at')
  local state = r[1]
  if not state then
    -- The record expired or was purged: the member points at nothing.
    dropped = dropped + redis.call('ZREM', KEYS[K_SCHEDULE], id)
  else
    local due = redis.call('ZSCORE', KEYS[K_SCHEDULE], id)
    if due and tonumber(due) <= NOW then
      redis.call('ZREM', KEYS[K_SCHEDULE], id)
      if state ~= 'PENDING' and state ~= 'RETRYING' then
        dropped = dropped + 1
      elseif tonumber(r[4] or 0) > 0 and NOW >= tonumber(r[4]) then
        move(tk, id, qi, state, 'EXPIRED')
        emit('TASK_EXPIRED', id, qi, 'EXPIRED', r[3])
        settle_idempotency(tk, ik, 'failed')
        expired = expired + 1
      else
        deliver(tk, id, qi, r[2], tonumber(r[3]) + 1)
        move(tk, id, qi, state, 'QUEUED')
        emit('TASK_QUEUED', id, qi, 'QUEUED', r[3])
        promoted = promoted + 1
      end
    end
  end
end
return {promoted, expired, dropped}
