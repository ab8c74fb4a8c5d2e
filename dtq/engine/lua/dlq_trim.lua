-- dlq_trim.lua: remove a queue's DLQ entries past the DLQ retention, with their index entries.
-- KEYS: lib layout with the DLQ's queue block.
-- ARGV after the header: 1 cutoff (ms; entries with ids below '<cutoff>-0' go),
--   2 at most this many entries per call
-- Reply: how many entries were removed (fewer than ARGV 2: nothing older is left)
-- Resend: the removed entries are gone: sent again it removes the next older ones, if any
-- (the caller loops until fewer than a batch are left, so the total is right either way).
local cutoff, batch = ARGV[ARG0 + 1], tonumber(ARGV[ARG0 + 2])
local rows = redis.call('XRANGE', qkey(1, Q_DLQ), '-', '(' .. cutoff .. '-0', 'COUNT', batch)
for _, row in ipairs(rows) do
  local id = ''
  for i = 1, #row[2], 2 do if row[2][i] == 't' then id = row[2][i + 1] end end
  redis.call('XDEL', qkey(1, Q_DLQ), row[1])
  dlq_unindex(id, 1, row[1])
end
return #rows
