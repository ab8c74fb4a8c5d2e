-- purge.lua: cancel a batch of a queue's waiting tasks and remove their entries (queue purge).
-- KEYS: lib layout with the queue's block, then one task block per item: record, result,
--   idempotency record.
-- ARGV after the header: 1 reason, then 4 fields per task block:
--   source ('PENDING' | 'QUEUED' | 'RETRYING': the state index the id was read from, or
--   'entry': a stream entry), task id, band (entries only, else ''), entry id (entries only)
-- Reply: {queued, scheduled, keys released, entries removed, skipped}
-- A waiting task (PENDING, QUEUED, RETRYING) becomes CANCELLED with cancel_reason 'purged';
-- its schedule member and stream entry go (also from a worker's PEL: that worker's claim then
-- absorbs it) and its idempotency key is released. RUNNING tasks are left alone. An entry that
-- is no task's current delivery is acknowledged and deleted. Every item leaves the index it
-- was read from, so a caller paging through an index always makes progress.
-- Resend: the tasks the first send cancelled are no longer waiting and their entries are
-- gone: sent again, nothing is written twice; index items count as skipped (the purge's
-- skipped figure can then be too high by that batch), removed entries are not counted again.
local reason = ARGV[ARG0 + 1]
local WAITING = {PENDING = true, QUEUED = true, RETRYING = true}
local queued, scheduled, released, removed, skipped = 0, 0, 0, 0, 0
local message = cjson.encode({class = 'dtq.TaskCancelled', message = 'purged: ' .. reason})

local function purge_task(tk, ik, id, r)
  local state = r[2]
  redis.call('ZREM', KEYS[K_SCHEDULE], id)
  local l = redis.call('HMGET', tk, 'name', 'lim', 'lh', 'lw')
  release(tk, id, 1, l[1], l[2], l[3], l[4])  -- a task waiting for a limit leaves its line
  ack(1, r[5], r[4])
  redis.call('HSET', tk, 'delivery', '', 'cancel_reason', 'purged', 'error', message)
  move(tk, id, 1, state, 'CANCELLED')
  count(1, 'purged')
  emit('TASK_CANCELLED', id, 1, 'CANCELLED', r[6], {reason = 'purged'})
  local key = redis.call('HGET', tk, 'idem')
  if key and key ~= '' and ik ~= tk and redis.call('HGET', ik, 'task') == id then
    redis.call('DEL', ik)
    released = released + 1
  end
  if state == 'QUEUED' then queued = queued + 1 else scheduled = scheduled + 1 end
end

for ti = 1, NT do
  local b = ARG0 + 1 + (ti - 1) * 4
  local source, id, band, eid = ARGV[b + 1], ARGV[b + 2], ARGV[b + 3], ARGV[b + 4]
  local tk, ik = tkey(ti, T_RECORD), tkey(ti, T_IDEM)
  local r = redis.call('HMGET', tk, 'id', 'state', 'queue', 'delivery', 'band', 'attempt')
  local mine = r[1] and r[3] == qname(1)
  if source ~= 'entry' then
    if mine and WAITING[r[2]] then
      purge_task(tk, ik, id, r)
    else
      -- Claimed or finished since it was read, or its record is gone: drop the index member
      -- (a no-op when move() already did) so the caller's next page moves on.
      redis.call('ZREM', qkey(1, index_of(source)), id)
      skipped = skipped + 1
    end
  elseif mine and r[4] == eid and r[2] == 'QUEUED' then
    purge_task(tk, ik, id, r)
  elseif mine and r[4] == eid and r[2] == 'RUNNING' then
    skipped = skipped + 1  -- the running attempt's own entry: its worker acknowledges it
  else
    -- Count only an entry still there (sent again, the first send's entries are gone).
    if #redis.call('XRANGE', stream_key(1, band), eid, eid) > 0 then removed = removed + 1 end
    ack(1, band, eid)
  end
end
return {queued, scheduled, released, removed, skipped}
