-- read.lua: read up to `capacity` new entries from the worker's queues in strict priority
-- order (band 0 of every queue, then band 1, then band 2), skipping paused queues.
-- XREADGROUP's COUNT is per stream, so reading here is what bounds prefetch to capacity.
-- Resend: a read whose reply was lost left its entries in this consumer's pending list;
-- sent again it reads the next new entries. The lost ones are never lost: the reaper settles
-- entries pending longer than VISIBILITY_TIMEOUT (reconcile.lua), as after a crash.
-- KEYS: lib layout with one block per queue the worker serves (no task blocks).
-- ARGV after the header: 1 consumer name, 2 capacity
-- Reply: {entries, watch}: entries holds the gateway's ENTRY fields per entry (reply_entry:
--   queue index, band, entry id, task id, idempotency key or ''); watch, present only when capacity was left,
--   lists the open streams' keys, for the worker to block on with XREADGROUP.
local consumer, want = ARGV[ARG0 + 1], tonumber(ARGV[ARG0 + 2])
local entries, watch = {}, {}

local function read(stream, n)
  local ok, res = pcall(redis.call, 'XREADGROUP', 'GROUP', GROUP, consumer, 'COUNT', n,
    'STREAMS', stream, '>')
  if not ok then
    -- NOGROUP: the stream or group is new (or Redis lost its data); create it and read again.
    redis.pcall('XGROUP', 'CREATE', stream, GROUP, '0', 'MKSTREAM')
    res = redis.call('XREADGROUP', 'GROUP', GROUP, consumer, 'COUNT', n, 'STREAMS', stream, '>')
  end
  if not res then return {} end
  return res[1][2]
end

local open = {}
for qi = 1, NQ do open[qi] = redis.call('SISMEMBER', KEYS[K_PAUSED], qname(qi)) == 0 end

for band = 0, 2 do
  for qi = 1, NQ do
    if want > 0 and open[qi] then
      for _, e in ipairs(read(stream_key(qi, band), want)) do
        local task_id, idem = '', ''
        local f = e[2]
        for i = 1, #f, 2 do
          if f[i] == 't' then task_id = f[i + 1] elseif f[i] == 'i' then idem = f[i + 1] end
        end
        reply_entry(entries, qi, band, e[1], task_id, idem)
        want = want - 1
      end
    end
  end
end

if want > 0 then
  -- Everything new was read: the worker blocks in XREADGROUP on every open stream.
  for band = 0, 2 do
    for qi = 1, NQ do
      if open[qi] then table.insert(watch, stream_key(qi, band)) end
    end
  end
end
return {entries, watch}
