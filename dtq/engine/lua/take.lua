-- take.lua: the worker's batch read and claim in one call: read up to `capacity` new entries
-- in strict priority order (lib.lua's read_new, as read.lua does) and claim them at once
-- (claim_entry, as claim.lua does): one round trip per batch instead of two.
-- Keys built here: an entry's task record and idempotency record are known only once the
-- entry is read, so they are built from the shard's key tag the gateway passes (keys.py's
-- forms 't:<id>' and 'idem:<queue>:<key>'). They share the tag, so every key the call
-- touches is in one hash slot. Every other key comes in KEYS, built by the gateway.
-- KEYS: lib layout (claim's) with one block per queue the worker serves and no task blocks,
--   then the worker's take mark (a string: the request token of its last call).
-- ARGV after the header: 1 worker id, 2 lease (ms), 3 capacity, 4 request token, 5 key tag,
--   then, only behind a blocking read (see Delivered below), 3 ids per queue block (bands 0,
--   1, 2): the newest entry id the worker knew of that stream, or '' for a stream not watched
-- Reply: {claimed, watch, read, again, left, now}: claimed holds the gateway's CLAIMED fields per
--   claimed task (as claim.lua's reply); watch, present only when capacity was left, lists
--   the open streams' keys, for the worker to block on with XREADGROUP; read counts the
--   entries read, claimed or not (absorbed, parked by flow control, given back), so the
--   worker reads again; again is 1 when this call's token was sent before (a resend); left
--   holds the gateway's ENTRY fields of entries read but left to claim.lua (see below); now
--   is Redis' clock (ms) when the call ran (the worker dates the leases a blocked read's
--   claim started by it).
-- Resend: entries a send claimed are no longer new to the group, so a resend after a lost
-- reply would read past them and leave them RUNNING and unrun until their lease ran out (the
-- reclaim then costing an attempt). So each call marks its token (one SET ... GET, which also
-- says whether the token came before) and writes it in every record it claims ('take'). The
-- same token again reads nothing: it hands back, lease renewed (claim_entry's resend case),
-- the entries in this consumer's pending list whose record carries the token. Entries the
-- first send left to claim.lua stay pending for the reaper (no attempt is lost: still QUEUED).
-- The worker changes its token only once a reply has arrived.
-- Delivered: sent in the same pipeline right behind the worker's blocking XREADGROUP, the
-- call first claims what that read delivered (lib.lua's read_delivered: no round trip
-- between an arrival and its claim), then reads new entries for the capacity left, as any
-- take. What the read brought beyond the capacity is left to claim.lua (left).
local worker, lease_ms, want = ARGV[ARG0 + 1], ARGV[ARG0 + 2], tonumber(ARGV[ARG0 + 3])
local token, tag = ARGV[ARG0 + 4], ARGV[ARG0 + 5]
local BAND = {[0] = '0', '1', '2'}  -- as claim.lua gets a band: the record's digits
claim_begin(worker, tonumber(lease_ms), token)
local left = {}  -- entries read and left to claim.lua (ENTRY fields): see below

if redis.call('SET', KEYS[NSHARED + NQ * QB + 1], token, 'PX', lease_ms, 'GET') == token then
  local again = 0
  for qi = 1, NQ do
    for band = 0, 2 do
      local s = stream_key(qi, band)
      local ok, pending = pcall(redis.call, 'XPENDING', s, GROUP, '-', '+', 1000, worker)
      for _, p in ipairs(ok and pending or {}) do
        local e = redis.call('XRANGE', s, p[1], p[1])[1]
        local f = e and e[2] or {}
        local task_id = ''
        for i = 1, #f, 2 do if f[i] == 't' then task_id = f[i + 1] end end
        local tk = tag .. 't:' .. task_id
        if task_id ~= '' and redis.pcall('HGET', tk, 'take') == token then
          claim_entry(qi, BAND[band], p[1], tk, tk, true)
          again = again + 1
        end
      end
    end
  end
  return {CLAIMED, {}, again, 1, left, NOW_S}
end

local function leave(qi, band, eid, task_id, idem) reply_entry(left, qi, band, eid, task_id, idem) end
local function take_entry(qi, band, eid, task_id, idem)
  local tk = tag .. 't:' .. (task_id ~= '' and task_id or 'gone')
  local ik = tk
  -- A key of the task that cannot be read here (on a Redis Cluster, moved already by a live
  -- migration of the slot) makes its claim the worker's, by claim.lua with declared keys,
  -- before anything of it is written. The idempotency record is written only after the task
  -- record, so it is tried first.
  if idem ~= '' then
    ik = tag .. 'idem:' .. qname(qi) .. ':' .. idem
    if type(redis.pcall('EXISTS', ik)) == 'table' then ik = nil end  -- an error reply
  end
  if not (ik and claim_entry(qi, BAND[band], eid, tk, ik, true)) then
    leave(qi, band, eid, task_id, idem)
  end
end
local delivered = 0
if #ARGV > ARG0 + 5 then
  local after = {}
  for i = 1, 3 * NQ do after[i] = ARGV[ARG0 + 5 + i] end
  delivered = read_delivered(worker, after, want, take_entry, leave)
end
local open, nread = read_new(worker, want - delivered, take_entry, claim_paused)
nread = nread + delivered
local watch = {}
if nread < want then
  -- Everything new was read: the worker blocks in XREADGROUP on every open stream.
  for band = 0, 2 do
    for qi = 1, NQ do
      if open[qi] then watch[#watch + 1] = stream_key(qi, band) end
    end
  end
end
return {CLAIMED, watch, nread, 0, left, NOW_S}
