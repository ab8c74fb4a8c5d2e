-- take.lua: the worker's batch read and claim in one call: read up to `capacity` new entries
-- in strict priority order (lib.lua's read_new, as read.lua does) and claim them at once
-- (claim_entry, as claim.lua does): one round trip per batch instead of two.
-- Keys built here: an entry's task record and idempotency record are known only once the
-- entry is read, so they are built from the shard's key tag the gateway passes (keys.py's
-- forms 't:<id>' and 'idem:<queue>:<key>'). They share the tag, so every key the call
-- touches is in one hash slot. Every other key comes in KEYS, built by the gateway.
-- KEYS: lib layout (claim's) with one block per queue the worker serves and no task blocks,
--   then the worker's take record (a string: the token and reply of its last call).
-- ARGV after the header: 1 worker id, 2 lease (ms), 3 capacity, 4 request token, 5 key tag
-- Reply: {claimed, watch, read, again, left}: claimed holds the gateway's CLAIMED fields per claimed task
--   (as claim.lua's reply); watch, present only when capacity was left, lists the open
--   streams' keys, for the worker to block on with XREADGROUP; read counts the entries read,
--   claimed or not (absorbed, parked by flow control, given back), so the worker reads again;
--   again is 1 when the reply is an earlier send's (its leases began then); left holds the
--   gateway's ENTRY fields of entries read but left for the worker to claim with claim.lua.
-- Resend: entries a send claimed are no longer new to the group, so a resend after a lost
-- reply would read past them and leave them RUNNING and unrun until their lease ran out (the
-- reclaim then costing an attempt). So a call that claims anything keeps its reply under the
-- request token for a lease; the same token again gets that reply back and reads nothing.
-- The worker changes its token only once a reply has arrived.
local worker, lease_ms, want = ARGV[ARG0 + 1], ARGV[ARG0 + 2], tonumber(ARGV[ARG0 + 3])
local token, tag = ARGV[ARG0 + 4], ARGV[ARG0 + 5]
local mark = KEYS[NSHARED + NQ * QB + 1]
local kept = redis.call('GET', mark)
if kept and string.sub(kept, 1, #token + 1) == token .. '\n' then
  local first = cmsgpack.unpack(string.sub(kept, #token + 2))
  return {first[1], {}, first[2], 1, first[3]}
end
local BAND = {[0] = '0', '1', '2'}  -- as claim.lua gets a band: the record's digits
claim_begin(worker, tonumber(lease_ms))
local left = {}  -- entries read and left to claim.lua (ENTRY fields): see below
local open, nread = read_new(worker, want, function(qi, band, eid, task_id, idem)
  local tk = tag .. 't:' .. (task_id ~= '' and task_id or 'gone')
  local ik = tk
  -- A key of the task that cannot be read here (on a Redis Cluster, moved already by a live
  -- migration of the slot) makes its claim the worker's, by claim.lua with declared keys,
  -- before anything of it is written. The idempotency record is written only after the task
  -- record, so it is tried first.
  if idem ~= '' then
    ik = tag .. 'idem:' .. qname(qi) .. ':' .. idem
    if redis.pcall('EXISTS', ik).err then ik = nil end
  end
  if not (ik and claim_entry(qi, BAND[band], eid, tk, ik, true)) then
    reply_entry(left, qi, band, eid, task_id, idem)
  end
end, claim_paused)
local watch = {}
if nread < want then
  -- Everything new was read: the worker blocks in XREADGROUP on every open stream.
  for band = 0, 2 do
    for qi = 1, NQ do
      if open[qi] then watch[#watch + 1] = stream_key(qi, band) end
    end
  end
end
if #CLAIMED > 0 or #left > 0 then
  redis.call('SET', mark, token .. '\n' .. cmsgpack.pack({CLAIMED, nread, left}), 'PX', lease_ms)
end
return {CLAIMED, watch, nread, 0, left}
