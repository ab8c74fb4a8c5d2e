-- claim.lua: turn entries a worker's blocking read brought into RUNNING attempts, or absorb
-- them (lib.lua's claim_entry says which entry is claimable; take.lua reads and claims in one
-- call when entries are waiting).
-- KEYS: lib layout with one block per queue the worker serves and one task block per entry.
-- ARGV after the header: 1 worker id, 2 lease (ms),
--   then 3 fields per entry, in task-block order: queue index, band, entry id
-- Reply: the gateway's CLAIMED fields per claimed task (reply_claimed, positional: the fields
--   of executor.Attempt marked "claim", in their order). Expired, absorbed
--   and cancel-requested entries are acknowledged here and not returned; entries of a paused
--   queue are replaced by a fresh delivery and not returned.
-- Resend: claim_entry's one exception (the entry this worker claimed already) is the resend
-- case: the same reply, nothing counted twice. A task the first send parked is no longer
-- QUEUED at that entry: the resend absorbs the entry and parks nothing twice.
claim_begin(ARGV[ARG0 + 1], tonumber(ARGV[ARG0 + 2]))
for ti = 1, NT do
  local base = ARG0 + 2 + (ti - 1) * 3
  claim_entry(qindex(ARGV[base + 1]), ARGV[base + 2], ARGV[base + 3], tkey(ti, T_RECORD),
    tkey(ti, T_IDEM))
end
return CLAIMED
