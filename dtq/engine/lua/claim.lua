-- claim.lua: turn entries just read by a worker into RUNNING attempts, or absorb them.
-- KEYS: lib layout with one block per queue the worker serves and one task block per entry.
-- ARGV after the header: 1 worker id, 2 lease (ms),
--   then 3 fields per entry, in task-block order: queue index, band, entry id
-- Reply: the gateway's CLAIMED fields per claimed task (reply_claimed, positional: the fields
--   of executor.Attempt marked "claim", in their order). Expired, absorbed
--   and cancel-requested entries are acknowledged here and not returned; entries of a paused
--   queue are replaced by a fresh delivery and not returned.
-- An entry is claimable only if the task is QUEUED and the entry is its current delivery;
-- anything else (stale duplicate, task finished, cancelled, or gone) is acknowledged and
-- counted as absorbed, and never reaches a handler. One exception: the entry this very worker
-- claimed already (the same call sent again) is handed back with its attempt unchanged.
-- Flow control (lib.lua's admit): a task over a concurrency limit is acknowledged and waits
-- in its group's line (still QUEUED, no attempt counted); one over a rate is scheduled
-- (PENDING) for its next token. The entry a released slot adds for a waiter is its delivery.
-- Resend: that exception is the resend case: the same reply, nothing counted twice. A task
-- the first send parked is no longer QUEUED at that entry: the resend absorbs the entry and
-- parks nothing twice.
BATCH = true  -- sorted-set writes and acknowledgements go out once per key (lib.lua)
local worker, lease_ms = ARGV[ARG0 + 1], tonumber(ARGV[ARG0 + 2])
local lease_at = string.format('%d', NOW + lease_ms)  -- formatted once (lib.lua: NOW_S)
local out = {}
-- The start event's worker field, encoded once per call (lib.lua's emit takes it as is).
local started_by = ',"worker":' .. cjson.encode(worker)
local function hand_out(id, eid, qi, band, r, attempt)
  -- Fields submit leaves out when at their default are nil here: reply_claimed sends ''.
  reply_claimed(out, id, eid, qi, band, r[5], r[6], attempt, r[8], r[9], r[10] or '{}', r[11])
end
-- Whether flow control holds this task back (lib.lua's admit), with the limit fields only
-- a limited task has read here.
local function limited(tk, id, qi, r, band)
  local f = redis.call('HMGET', tk, 'lp', 'lws')
  return admit(tk, id, qi, {name = r[5], lim = r[16], lw = r[17], lp = f[1], lws = f[2],
    band = band, idem = r[11]})
end
local paused = {}
local function is_paused(qi)
  if paused[qi] == nil then
    paused[qi] = redis.call('SISMEMBER', KEYS[K_PAUSED], qname(qi)) == 1
  end
  return paused[qi]
end

for ti = 1, NT do
  local base = ARG0 + 2 + (ti - 1) * 3
  local qi, band, eid = tonumber(ARGV[base + 1]), ARGV[base + 2], ARGV[base + 3]
  local tk, ik = tkey(ti, T_RECORD), tkey(ti, T_IDEM)
  -- What the hot path needs, and no more: each field is a scan of the record (a missing one
  -- scans it whole), so the fields only a rare branch uses are read there.
  local r = redis.call('HMGET', tk, 'id', 'state', 'delivery', 'expires_at', 'name', 'payload',
    'attempt', 'max_attempts', 'timeout', 'retry', 'idem', 'cancel', 'enqueued_at', 'band',
    'queue', 'lim', 'lw')
  local id, state, lim, lw = r[1], r[2], r[16], r[17]
  -- Entry ids are unique per stream only: the delivery is this entry of this stream.
  local here = r[14] == band and r[15] == qname(qi)
  local current = r[3] == eid and here
  if not current and here and state == 'QUEUED' and r[3] == '' and woken(qi, lw) then
    redis.call('HSET', tk, 'delivery', eid)  -- the entry a released slot added for it
    current = true
  end
  if state == 'RUNNING' and current and redis.call('HGET', tk, 'worker') == worker then
    -- redis-py resent this call because a dropped connection lost its reply (Redis restarted
    -- after the claim). A worker never reads an entry twice, so this is that claim: absorbing
    -- it would leave the attempt unrun until its lease ran out. Hand it back, lease renewed.
    redis.call('HSET', tk, 'lease', lease_at)
    zset(KEYS[K_RUNNING], id, lease_at)
    hand_out(id, eid, qi, band, r, r[7])  -- the record's digits, as the first claim sent
  elseif not id or state ~= 'QUEUED' or not current then
    ack(qi, band, eid)
    count(qi, 'absorbed')
    emit('TASK_DUPLICATE_ABSORBED', id or '', qi, state or 'GONE', r[7], {entry = eid})
  elseif is_paused(qi) then
    -- A blocking read that began before the queue was paused: give the entry back.
    ack(qi, band, eid)
    deliver(tk, id, qi, band, tonumber(r[7]) + 1)
  elseif tonumber(r[4] or 0) > 0 and NOW >= tonumber(r[4]) then
    ack(qi, band, eid)
    release(tk, id, qi, r[5], lim, nil, lw)  -- a slot handed to it while it waited
    move(tk, id, qi, 'QUEUED', 'EXPIRED', {'delivery', ''})
    emit('TASK_EXPIRED', id, qi, 'EXPIRED', r[7])
    settle_idempotency(tk, ik, 'failed', r[11])
  elseif r[12] == '1' then
    -- Cancel was requested while an earlier attempt ran, and that attempt was reclaimed:
    -- honour the request instead of starting the task again.
    ack(qi, band, eid)
    release(tk, id, qi, r[5], lim, nil, lw)
    move(tk, id, qi, 'QUEUED', 'CANCELLED', {'delivery', ''})
    emit('TASK_CANCELLED', id, qi, 'CANCELLED', r[7])
    settle_idempotency(tk, ik, 'failed', r[11])
  elseif (lim or (lw and lw ~= '') or queue_limits(qi)) and limited(tk, id, qi, r, band) then
    ack(qi, band, eid)  -- it waits for a slot or a token (admit recorded where)
  else
    local attempt = string.format('%d', tonumber(r[7]) + 1)
    zset(KEYS[K_RUNNING], id, lease_at)
    observe(qi, 'wait', NOW - tonumber(r[13] or NOW))
    -- The hot path, written directly: what move(QUEUED -> RUNNING) writes, without its
    -- generic tables.
    redis.call('HSET', tk, 'attempt', attempt, 'worker', worker, 'started_at', NOW_S,
      'lease', lease_at, 'state', 'RUNNING', 'updated_at', NOW_S)
    zset(qkey(qi, IX.QUEUED), id, false)
    zset(qkey(qi, IX.RUNNING), id, NOW_S)
    count(qi, COUNTER.RUNNING)
    emit('TASK_STARTED', id, qi, 'RUNNING', attempt, started_by)
    hand_out(id, eid, qi, band, r, attempt)
  end
end
return out
