-- read.lua: read up to `capacity` new entries from the worker's queues in strict priority
-- order (band 0 of every queue, then band 1, then band 2), skipping paused queues (lib.lua's
-- read_new). The worker reads with take.lua, which also claims; this reads only.
-- Resend: a read whose reply was lost left its entries in this consumer's pending list;
-- sent again it reads the next new entries. The lost ones are never lost: the reaper settles
-- entries pending longer than VISIBILITY_TIMEOUT (reconcile.lua), as after a crash.
-- KEYS: lib layout with one block per queue the worker serves (no task blocks).
-- ARGV after the header: 1 consumer name, 2 capacity
-- Reply: {entries, watch}: entries holds the gateway's ENTRY fields per entry (reply_entry:
--   queue index, band, entry id, task id, idempotency key or ''); watch, present only when capacity was left,
--   lists the open streams' keys, for the worker to block on with XREADGROUP.
local want = tonumber(ARGV[ARG0 + 2])
local entries, watch = {}, {}
local open, nread = read_new(ARGV[ARG0 + 1], want, function(qi, band, eid, task_id, idem)
  reply_entry(entries, qi, band, eid, task_id, idem)
end)
if nread < want then
  -- Everything new was read: the worker blocks in XREADGROUP on every open stream.
  for band = 0, 2 do
    for qi = 1, NQ do
      if open[qi] then table.insert(watch, stream_key(qi, band)) end
    end
  end
end
return {entries, watch}
