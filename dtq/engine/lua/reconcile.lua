-- reconcile.lua: settle stream entries found pending too long or held by a dead consumer.
-- KEYS: lib layout with the batch's queue blocks and one task block per entry.
-- ARGV after the header: 1 DLQ enabled ('1'/'0'),
--   then 3 fields per entry: queue index, band, entry id
-- Reply: {redelivered, reclaimed, absorbed, left}
-- This is the backstop behind leases: whatever state the record is in, the entry ends either
-- acknowledged, replaced by a fresh delivery, or (task still RUNNING under a live lease) left.
-- Resend: the first send acknowledged and deleted the entries it settled; sent again, they
-- are no current delivery and already gone, so they are acknowledged (a no-op) and not
-- counted or announced again. The reply then counts nothing (it is only logged).
local use_dlq = ARGV[ARG0 + 1]
local redelivered, reclaimed, absorbed, left = 0, 0, 0, 0

for ti = 1, NT do
  local b = ARG0 + 1 + (ti - 1) * 3
  local qi, band, eid = tonumber(ARGV[b + 1]), ARGV[b + 2], ARGV[b + 3]
  local tk, ik = tkey(ti, T_RECORD), tkey(ti, T_IDEM)
  local r = redis.call('HMGET', tk, 'id', 'state', 'delivery', 'lease', 'attempt', 'band',
    'queue', 'lw')
  local id, state = r[1], r[2]
  -- Entry ids are unique per stream only: the delivery is this entry of this stream.
  local here = id and r[6] == band and r[7] == qname(qi)
  local current = here and r[3] == eid
  if here and not current and state == 'QUEUED' and r[3] == '' and woken(qi, r[8]) then
    current = true  -- the entry a released slot added for a waiter (lib.lua's wake)
  end
  if current and state == 'RUNNING' then
    if tonumber(r[4] or '0') > NOW then
      left = left + 1
    else
      reclaim_lost(tk, ik, id, qi, use_dlq)
      reclaimed = reclaimed + 1
    end
  elseif current and state == 'QUEUED' then
    -- Read by a consumer that died before claiming it: deliver it afresh, same attempt.
    ack(qi, band, eid)
    deliver(tk, id, qi, band, tonumber(r[5]) + 1)
    emit('TASK_REDELIVERED', id, qi, 'QUEUED', r[5], {entry = eid})
    redelivered = redelivered + 1
  else
    local live = #redis.call('XRANGE', stream_key(qi, band), eid, eid) > 0
    ack(qi, band, eid)
    if live then  -- an entry the first send of this call settled is gone: not counted twice
      count(qi, 'absorbed')
      emit('TASK_DUPLICATE_ABSORBED', id or '', qi, state or 'GONE', r[5], {entry = eid})
      absorbed = absorbed + 1
    end
  end
end
return {redelivered, reclaimed, absorbed, left}
