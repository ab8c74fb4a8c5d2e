-- renew.lua: extend the leases of the attempts a live worker holds (its heartbeat).
-- KEYS: lib layout (renew's: each queue's RUNNING index, each task's record) with the queue
--   blocks of the attempts' queues and one task block per held attempt.
-- ARGV after the header: 1 lease (ms), then 4 fields per attempt: queue index, task id, entry
--   id, attempt
-- Reply: one integer per attempt: 0 lost (reclaimed or finished elsewhere; stop working on
--   it), 1 renewed, 2 renewed and a cancel was requested.
-- Resend: renewing again from the time of the second send: the same answer.
local lease_at = string.format('%d', NOW + tonumber(ARGV[ARG0 + 1]))  -- lib.lua: NOW_S
local out = {}
for ti = 1, NT do
  local b = ARG0 + 1 + (ti - 1) * 4
  local qi, id, eid, attempt = qindex(ARGV[b + 1]), ARGV[b + 2], ARGV[b + 3], ARGV[b + 4]
  local tk = tkey(ti, T_RECORD)
  local r = redis.call('HMGET', tk, 'state', 'delivery', 'attempt', 'cancel')
  if r[1] == 'RUNNING' and r[2] == eid and r[3] == attempt then
    redis.call('HSET', tk, 'lease', lease_at)
    redis.call('ZADD', qkey(qi, IX.RUNNING), lease_at, id)  -- the reaper reads it there
    table.insert(out, r[4] == '1' and 2 or 1)
  else
    table.insert(out, 0)
  end
end
return out
