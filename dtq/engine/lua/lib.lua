-- lib.lua: helpers prepended to every dtq script (not a script on its own).
-- scripts.py includes only the paragraphs (blocks between blank lines) a script uses: a
-- paragraph that defines a name the script (or an included paragraph) mentions. Keep a
-- state and the functions that write and flush it in one paragraph. A call's state starts
-- empty on every call (a new script run, or the library's begin_call): the flush_* functions,
-- run once at its end, write it out and leave it as it is.
--
-- Every script receives KEYS in its layout (dtq/engine/layout.py; the full layout unless the
-- script has its own, which leaves out keys it never uses), built in this order:
--   shared keys, any of: schedule (zset), events (stream), queues (set), paused (set),
--                         throughput bucket (hash),
--                         DLQ index (hash task id -> '<queue> <DLQ entry id>')
--   then one block of QB keys per queue (ARGV[1] blocks), any of:
--                         9 state indexes (zset id -> ms, IX[state] places them: when the
--                         task entered the state, but RUNNING's is the lease deadline, which
--                         the reaper reads), stats (hash),
--                         dlq (stream), stream band 0, band 1, band 2 (all three, adjacent),
--                         flow control: limits (hash), held slots (zset), waiting line (zset),
--                         rate meters (zset)
--   then one block of TB keys per task (ARGV[2] blocks), any of:
--                         task record (hash), result (string), idempotency record (hash)
-- K_*, Q_*, IX and T_* (generated below) give each key's place; a key the layout leaves out
-- is nil there, so a script that uses it fails loudly instead of writing another key.
-- Every script receives the same ARGV header:
--   ARGV[1] queue blocks  ARGV[2] task blocks  ARGV[3] event stream max length
--   ARGV[4] retention of terminal records (s)  ARGV[5] result ttl (s)
--   ARGV[6] idempotency record ttl (s)  ARGV[7] consumer group
--   ARGV[8 .. 7+nq] queue names, in block order; script arguments follow (see ARG0).

-- @generated layout (layout.py)

-- @generated constants (protocol.py)

local NQ, NT = tonumber(ARGV[1]), tonumber(ARGV[2])
local EVENTS_MAXLEN = ARGV[3]
-- Kept as strings: they are only ever redis.call arguments, and Redis formats a Lua number
-- argument with snprintf("%.17g") on every call (glibc's slow float path; ~10% of claim's and
-- finalize's Redis CPU went there). Hot paths pass strings: NOW_S, and '%d' for integers.
local RETENTION, RESULT_TTL, IDEM_TTL = ARGV[4], ARGV[5], ARGV[6]
local GROUP = ARGV[7]
local ARG0 = 7 + NQ  -- script arguments start at ARGV[ARG0 + 1]

local CLOCK = redis.call('TIME')  -- a script that names neither NOW nor NOW_S skips it
local NOW_S = CLOCK[1] .. string.sub('00000' .. CLOCK[2], -6, -4)  -- NOW's digits, no formatting

-- NOW as a number: its own paragraph, so a script that needs only NOW_S skips the two
-- tonumber() (~2 kIr each: strtod).
local NOW = tonumber(CLOCK[1]) * 1000 + math.floor(tonumber(CLOCK[2]) / 1000)

-- Deadlines as absolute ms, made on first use in a call: Redis rewrites a relative EXPIRE or
-- SET EX into PEXPIREAT / PXAT for replicas and the AOF on every command (an argument vector
-- rebuilt each time); given absolute, there is nothing to rewrite.
local retain_at, result_at = false, false
local function retention_deadline()
  if not retain_at then retain_at = string.format('%d', NOW + tonumber(RETENTION) * 1000) end
  return retain_at
end
local function result_deadline()
  if not result_at then result_at = string.format('%d', NOW + tonumber(RESULT_TTL) * 1000) end
  return result_at
end

local function qkey(qi, offset) return KEYS[NSHARED + (qi - 1) * QB + offset] end
local function qname(qi) return ARGV[7 + qi] end
local function tkey(ti, offset) return KEYS[NSHARED + NQ * QB + (ti - 1) * TB + offset] end
-- A state's index key place in this script's queue blocks; a state the layout leaves out is an
-- error, never a silently skipped index write.
local function index_of(state) return IX[state] or error('no ' .. state .. ' index in this layout') end

-- band: digits (a record's, ARGV's) or a number; the digits need no tonumber (~1.5 kIr, per
-- acknowledged task).
local function stream_key(qi, band)
  local b = band == '1' and 1 or band == '0' and 0 or band == '2' and 2 or tonumber(band)
  return qkey(qi, Q_STREAM0 + b)
end

-- A queue index sent as digits -> its number, with no tonumber (~1.5 kIr) per task once a
-- call has seen it (a library keeps the table from call to call).
local QINDEX = {['1'] = 1}
local function qindex(digits)
  local qi = QINDEX[digits]
  if not qi then
    qi = tonumber(digits)
    QINDEX[digits] = qi
  end
  return qi
end

-- Lifecycle events are JSON objects built by concatenation (cheaper than cjson.encode of a
-- table), gathered during the call and written by flush_events (which scripts.py appends to
-- every script) as one entry of the capped event stream: a batch of claims or outcomes costs
-- one XADD. Ids, queue names and states need no escaping (keys.py and ids.py allow only
-- [A-Za-z0-9_.:-]); other strings go through cjson. extra: more fields, as a table or
-- already encoded (',"k":v...', for a field every event of a call shares).
local events = {}
local function extra_fields(extra)  -- ',"k":v...' of a table (a string is that already)
  if type(extra) == 'string' then return extra end
  local s = ''
  for k, v in pairs(extra) do
    s = s .. ',"' .. k .. '":' .. (type(v) == 'number' and v or cjson.encode(v))
  end
  return s
end
-- event(): the attempt is digits already (a record's, or ARGV's that the fence compared with
-- the record's); emit() takes any attempt. One concatenation makes the event's one string.
local function event(etype, id, qi, state, attempt, extra)
  events[#events + 1] = '{"type":"' .. etype .. '","task":"' .. (id or '') .. '","queue":"' ..
    qname(qi) .. '","state":"' .. (state or '') .. '","attempt":' .. attempt .. ',"ts":' ..
    NOW_S .. (extra and extra_fields(extra) or '') .. '}'
end
local function emit(etype, id, qi, state, attempt, extra)
  -- An attempt given as digits (ARGV, a record field) is written as is: no number formatting.
  if type(attempt) ~= 'string' or not string.find(attempt, '^%d+$') then
    attempt = tonumber(attempt) or 0
  end
  event(etype, id, qi, state, attempt, extra)
end
-- The hot events (one per task: TASK_STARTED, TASK_SUCCEEDED) of one type and queue in a call
-- are one object listing the tasks and their attempts, at the first one's place (events.py's
-- decode gives each task its own event back): a task costs two table appends instead of its
-- own JSON text (~6 kIr). state and extra are the same for every task of a type and queue
-- in one call.
local grouped = {}  -- etype -> qi -> {head = the object's opening fields, tasks, attempts}
local function event_of_many(etype, id, qi, state, attempt, extra)
  local by_queue = grouped[etype]
  if not by_queue then
    by_queue = {}
    grouped[etype] = by_queue
  end
  local g = by_queue[qi]
  if not g then
    g = {head = '{"type":"' .. etype .. '","queue":"' .. qname(qi) .. '","state":"' .. state ..
      '","ts":' .. NOW_S .. (extra or ''), tasks = {}, attempts = {}}
    by_queue[qi] = g
    events[#events + 1] = g
  end
  local n = #g.tasks + 1
  g.tasks[n], g.attempts[n] = id, attempt
end
local function flush_events()
  local n = #events
  if n == 0 then return end
  for i = 1, n do
    local g = events[i]
    if type(g) == 'table' then
      events[i] = g.head .. ',"tasks":["' .. table.concat(g.tasks, '","') .. '"],"attempts":[' ..
        table.concat(g.attempts, ',') .. ']}'
    end
  end
  local payload = events[1]
  if n > 1 then payload = '[' .. table.concat(events, ',') .. ']' end
  redis.call('XADD', KEYS[K_EVENTS], 'MAXLEN', '~', EVENTS_MAXLEN, '*', 'e', payload)
end

-- Counters are summed in the script and written once per field when it ends (flush_counts,
-- which scripts.py appends to every script): a batch of claims or outcomes then costs one
-- HINCRBY per field instead of several per task. count() adds to the queue's stats hash and
-- to its per-minute bucket, tally() to the stats hash only (levels such as 'active', and the
-- histograms); both only add to the call's per-queue table: the key and bucket field names
-- are made once per field in flush_counts, not per task.
local counts, levels = {}, {}  -- qi -> field -> n
local function count(qi, field, n)
  local c = counts[qi]
  if not c then c = {}; counts[qi] = c end
  c[field] = (c[field] or 0) + (n or 1)
end
local function tally(qi, field, n)
  local c = levels[qi]
  if not c then c = {}; levels[qi] = c end
  c[field] = (c[field] or 0) + (n or 1)
end
local function hincrby(key, field, n, digits)  -- digits: n formatted, when the caller has it
  if n == 0 then return end
  local v = redis.call('HINCRBY', key, field, digits or string.format('%d', n))
  -- A field just created in the per-minute bucket: (re)arm two hours of history.
  if key == KEYS[K_TP] and v == n then redis.call('EXPIRE', key, '7200') end
end
local function flush_counts()
  for qi, c in pairs(counts) do
    local stats, q = qkey(qi, Q_STATS), qname(qi) .. ':'
    for field, n in pairs(c) do
      local digits = string.format('%d', n)  -- once for both keys (~2 kIr)
      hincrby(stats, field, n, digits)
      hincrby(KEYS[K_TP], q .. field, n, digits)
    end
  end
  for qi, c in pairs(levels) do
    local stats = qkey(qi, Q_STATS)
    for field, n in pairs(c) do hincrby(stats, field, n) end
  end
end

-- Latency histograms in the queue's stats hash: h_<kind>_<i> counts observations in bucket i
-- (upper bounds in ms below, i = #LATENCY_BUCKETS + 1 for larger) and h_<kind>_sum (ms); the
-- count is the sum of the buckets (the read side adds them; h_<kind>_count, written before,
-- is no longer read). LATENCY_BUCKETS comes from protocol.py (generated above).
local NBUCKETS = #LATENCY_BUCKETS
-- kind -> {[i] = bucket field, sum = sum field}: each name made on first use, the buckets'
-- one by one (a library keeps them from call to call; a script makes them again each call,
-- where all 15 at once cost ~60 kIr a call: a number in a concatenation is sprintf'd).
local HIST_FIELDS = {wait = false, run = false, limit_wait = false}
local function observe(qi, kind, ms)
  if not ms or ms < 0 then return end
  local i = 1
  while i <= NBUCKETS and ms > LATENCY_BUCKETS[i] do i = i + 1 end
  local names = HIST_FIELDS[kind]
  if not names then
    names = {sum = 'h_' .. kind .. '_sum'}
    HIST_FIELDS[kind] = names
  end
  local field = names[i]
  if not field then
    field = 'h_' .. kind .. '_' .. i
    names[i] = field
  end
  tally(qi, field)
  tally(qi, names.sum, ms - ms % 1)
end

-- Batched writes. A hot script (claim, finalize) sets BATCH = true: its sorted-set writes
-- and acknowledgements are then gathered and sent at the end of the call, one command per
-- key (ZADD key s1 m1 s2 m2 ..., ZREM key m1 m2 ..., XACK/XDEL stream id1 id2 ...) instead
-- of one per task. Only scripts that never read those keys after writing them may set it.
-- zsets[key][member] = score, or false to remove: the last write of a member wins, which is
-- what the same writes one by one would have left.
local BATCH = false
local zsets, zset_keys = {}, {}
local function zset(key, member, score)
  if not BATCH then
    if score then redis.call('ZADD', key, score, member) else redis.call('ZREM', key, member) end
    return
  end
  local t = zsets[key]
  if not t then
    t = {}
    zsets[key] = t
    zset_keys[#zset_keys + 1] = key
  end
  t[member] = score
end
local CHUNK = 200  -- members per command (unpack has a stack limit)
local function send_chunked(head, items)
  for i = 1, #items, CHUNK do
    local args = {unpack(head)}
    for j = i, math.min(i + CHUNK - 1, #items) do args[#args + 1] = items[j] end
    redis.call(unpack(args))
  end
end
local function flush_zsets()
  for _, key in ipairs(zset_keys) do
    local adds, rems = {}, {}
    for member, score in pairs(zsets[key]) do
      if score then
        adds[#adds + 1] = score
        adds[#adds + 1] = member
      else
        rems[#rems + 1] = member
      end
    end
    if #adds > 0 then
      for i = 1, #adds, 2 * CHUNK do
        redis.call('ZADD', key, unpack(adds, i, math.min(i + 2 * CHUNK - 1, #adds)))
      end
    end
    if #rems > 0 then send_chunked({'ZREM', key}, rems) end
  end
end

-- Move a task record between states, keeping indexes, counters and retention in step.
-- fields: more record fields to set in the same HSET (name, value, ...; the list is reused),
-- or nil.
local function move(tk, id, qi, old, new, fields)
  if old and STATE_ORDER[old] then zset(qkey(qi, index_of(old)), id, false) end
  zset(qkey(qi, index_of(new)), id, NOW_S)
  local set = fields or {}
  local n = #set
  set[n + 1], set[n + 2], set[n + 3], set[n + 4] = 'state', new, 'updated_at', NOW_S
  if COUNTER[new] then count(qi, COUNTER[new]) end
  local ends = TERMINAL[new] and not TERMINAL[old]
  if ends then
    set[n + 5], set[n + 6] = 'finished_at', NOW_S
    tally(qi, 'active', -1)
  end
  redis.call('HSET', tk, unpack(set))
  if ends then redis.call('PEXPIREAT', tk, retention_deadline()) end
end

-- The record fields that append one JSON object to an attempt history, keeping it a valid
-- JSON array: n and h are the record's history_n and history as read.
local MAX_HISTORY = 100
local function history_fields(n, h, entry_json)
  n = (tonumber(n) or 0) + 1
  if n > MAX_HISTORY then return {'history_n', n} end
  if not h or h == '' or h == '[]' then
    h = '[' .. entry_json .. ']'
  else
    h = string.sub(h, 1, -2) .. ',' .. entry_json .. ']'
  end
  return {'history_n', n, 'history', h}
end

local function add_history(tk, entry_json)
  local r = redis.call('HMGET', tk, 'history_n', 'history')
  redis.call('HSET', tk, unpack(history_fields(r[1], r[2], entry_json)))
end

-- Acknowledge and delete a stream entry: acknowledged entries are the only ones we delete.
-- Under BATCH the entries are acknowledged at the very end of the call (flush_acks, after
-- every other write: ack last), one XACK per stream, then drop_acked removes them.
local acks, ack_keys = {}, {}
local function ack(qi, band, eid)
  if eid and eid ~= '' then
    local s = stream_key(qi, band)
    if not BATCH then
      redis.call('XACK', s, GROUP, eid)
      redis.call('XDEL', s, eid)
      return
    end
    local t = acks[s]
    if not t then
      t = {}
      acks[s] = t
      ack_keys[#ack_keys + 1] = s
    end
    t[#t + 1] = eid
  end
end
-- Remove entries just acknowledged, so a stream keeps exactly its pending and unread entries
-- (the read side counts XLEN minus pending as a queue's depth). XDEL seeks each entry from the
-- start of its stream node (~4.5 us an entry at Redis' 100 entries a node); XTRIM MINID drops
-- whole nodes and walks a partial one once per call. Every entry below the group's oldest
-- pending one was delivered (one group, created at 0, reads in id order) and is no longer
-- pending, so it is acknowledged: trimming below it never cuts the PEL (Redis < 8.2 trims
-- regardless of it). With nothing pending, every entry up to the newest acknowledged one is.
-- Acknowledged entries above the oldest pending one (a long task started before them) are
-- deleted one by one.
local function id_parts(eid)
  local ms, seq = string.match(eid, '^(%d+)-(%d+)$')
  return tonumber(ms), tonumber(seq)
end
-- Whether stream id a is below b. Ids of one length compare as strings: their ms parts have
-- the same number of digits (13 for every id Redis makes from 2001 to 2286), so their seq
-- parts do too. No number conversion then (id_parts costs ~6 kIr, this ~0.3, per task).
local function id_below(a, b)
  if #a == #b then return a < b end
  local ams, aseq = id_parts(a)
  local bms, bseq = id_parts(b)
  return ams < bms or (ams == bms and aseq < bseq)
end
local function drop_acked(s, ids)
  local ok, pending = pcall(redis.call, 'XPENDING', s, GROUP, '-', '+', '1')
  if not ok then  -- the stream or its group is gone (Redis lost them): as XDEL alone would
    send_chunked({'XDEL', s}, ids)
    return
  end
  local first = pending[1] and pending[1][1]
  local above, top = {}, nil  -- top: the newest acknowledged entry below first
  for _, eid in ipairs(ids) do
    if first and id_below(first, eid) then
      above[#above + 1] = eid
    elseif not top or id_below(top, eid) then
      top = eid
    end
  end
  if top then
    local minid = first
    if not minid then
      local ms, seq = id_parts(top)
      minid = string.format('%d-%d', ms, seq + 1)
    end
    redis.call('XTRIM', s, 'MINID', minid)
  end
  if #above > 0 then send_chunked({'XDEL', s}, above) end
end
local function flush_acks()
  for _, s in ipairs(ack_keys) do
    send_chunked({'XACK', s, GROUP}, acks[s])
    drop_acked(s, acks[s])
  end
end

-- Add a fresh stream entry for the task's next attempt and return its id. The entry names
-- the task's idempotency key (field 'i'), so the worker that reads it can pass that key's
-- record to claim.lua, which settles it when the task expires or is cancelled there.
local function add_entry(id, qi, band, next_attempt, idem)
  if idem and idem ~= '' then
    return redis.call('XADD', stream_key(qi, band), '*', 't', id, 'a', next_attempt, 'i', idem)
  end
  return redis.call('XADD', stream_key(qi, band), '*', 't', id, 'a', next_attempt)
end

-- Add the entry and make it the record's only valid delivery.
local function deliver(tk, id, qi, band, next_attempt)
  local eid = add_entry(id, qi, band, next_attempt, redis.call('HGET', tk, 'idem'))
  redis.call('HSET', tk, 'delivery', eid, 'enqueued_at', NOW)
  return eid
end

-- Flow control (docs/flow-control.md). A task's own limits are its record's 'lim' field,
-- "<max concurrency>|<rate count>|<rate period ms>|<burst>|<key value>" (written at submit
-- only when the task has limits; empty parts are unset); its queue's are the queue's limits
-- hash ('max_concurrency', 'rate' = "<count>|<period ms>|<burst>"). Limit groups: 'cq' and
-- 'rq' are the queue's, 'ct|<task>[|<key>]' and 'rt|<task>[|<key>]' the task's.
-- A concurrency slot is the member '<group>\0<task id>' of the queue's held set (all scores 0,
-- counted by ZLEXCOUNT); the record's 'lh' = '1' while the task holds slots. A task refused a
-- slot waits, acknowledged off its stream, in the queue's waiting line: the member
-- '<group>\0<seq>\0<id>\0<band>\0<idem>' (score 0, so a group's members sort by seq: FIFO),
-- also kept in the record's 'lw'. Releasing a slot passes it to the group's first waiter
-- (the held member is written for the waiter) and adds a stream entry for it: the woken task
-- is then claimable with the slot already its own. Rates are GCRA meters: the queue's rate
-- set scores each group by its theoretical arrival time (ms; a score in the past is a full
-- meter, so those members are dropped). A task refused by a rate is scheduled (PENDING) at
-- the instant its token is due, the token paid ahead ('lp' = that instant), so later tasks
-- queue behind it.
local qlimits, pruned = {}, {}
local function queue_limits(qi)
  local l = qlimits[qi]
  if l == nil then
    local r = redis.call('HMGET', qkey(qi, Q_LIMITS), 'max_concurrency', 'rate')
    l = {conc = tonumber(r[1]), rate = r[2]}
    if not l.conc and not l.rate then l = false end
    qlimits[qi] = l
  end
  return l
end
local UNITS = {[1000] = '/s', [60000] = '/m', [3600000] = '/h'}
local function rate_of(g, count, period, burst, label)
  local n, p, b = tonumber(count), tonumber(period), tonumber(burst)
  local name = n .. (UNITS[p] or (' per ' .. p .. ' ms'))
  return {g = g, step = p / n, slack = (math.max(b, 1) - 1) * p / n, label = 'rate ' .. name ..
    ' on ' .. label}
end
-- The task's limit groups: concurrency {g, max, label} and rates {g, step, slack, label}.
local function flow_groups(qi, name, lim)
  local conc, rates = {}, {}
  if lim and lim ~= '' then
    local maxc, n, p, b, key = string.match(lim, '^(%d*)|(%d*)|(%d*)|(%d*)|(.*)$')
    local suffix, label = name, 'task ' .. name
    if key ~= '' then suffix, label = name .. '|' .. key, label .. ' key ' .. key end
    if maxc ~= '' then conc[#conc + 1] = {g = 'ct|' .. suffix, max = tonumber(maxc), label = label} end
    if n ~= '' then rates[#rates + 1] = rate_of('rt|' .. suffix, n, p, b, label) end
  end
  local q = queue_limits(qi)
  if q and q.conc then conc[#conc + 1] = {g = 'cq', max = q.conc, label = 'queue ' .. qname(qi)} end
  if q and q.rate and q.rate ~= '' then
    local n, p, b = string.match(q.rate, '^(%d+)|(%d+)|(%d+)$')
    if n then rates[#rates + 1] = rate_of('rq', n, p, b, 'queue ' .. qname(qi)) end
  end
  return conc, rates
end
local function held_count(qi, g)
  return redis.call('ZLEXCOUNT', qkey(qi, Q_HELD), '[' .. g .. '\0', '(' .. g .. '\1')
end
local function first_waiter(qi, g)
  return redis.call('ZRANGEBYLEX', qkey(qi, Q_WAIT), '[' .. g .. '\0', '(' .. g .. '\1',
    'LIMIT', 0, 1)[1]
end
local function waiter_seq(member) return string.match(member or '', '^[^%z]*%z(%d+)%z') end
-- Pass free slots of group g to its first waiters, up to max (nil: the group has no limit
-- now) and at most 16 per call; a waiter gets the slot and a stream entry of its own.
local function wake(qi, g, max)
  local n = 16
  if max then n = math.min(n, max - held_count(qi, g)) end
  for _ = 1, n do
    local head = first_waiter(qi, g)
    if not head then return end
    local _, id, band, idem = string.match(head, '^[^%z]*%z(%d+)%z([^%z]*)%z(%d)%z(.*)$')
    redis.call('ZREM', qkey(qi, Q_WAIT), head)
    redis.call('ZADD', qkey(qi, Q_HELD), 0, g .. '\0' .. id)
    add_entry(id, qi, band, 0, idem)
    count(qi, 'limit_woken')
  end
end
-- The limit groups a task may hold a slot of (the queue's whatever its limits now).
local function slot_groups(qi, name, lim)
  local conc = flow_groups(qi, name, lim)
  local seen, out = {}, {}
  for _, c in ipairs(conc) do seen[c.g] = true; out[#out + 1] = c end
  if not seen.cq then out[#out + 1] = {g = 'cq'} end
  return out
end
-- Give back every slot the task holds or was handed, leave the waiting line, and wake the
-- next waiters. Safe to run twice: a second run finds nothing to remove.
local function release(tk, id, qi, name, lim, lh, lw)
  if (not lh or lh == '') and (not lw or lw == '') then return end
  if lw and lw ~= '' then redis.call('ZREM', qkey(qi, Q_WAIT), lw) end
  for _, c in ipairs(slot_groups(qi, name, lim)) do
    if redis.call('ZREM', qkey(qi, Q_HELD), c.g .. '\0' .. id) == 1 then wake(qi, c.g, c.max) end
  end
  redis.call('HSET', tk, 'lh', '', 'lw', '')
end
-- Whether a task's entry is the one a released slot added for it: the record waits in a
-- line (lw) it is no longer in.
local function woken(qi, lw)
  return lw and lw ~= '' and not redis.call('ZSCORE', qkey(qi, Q_WAIT), lw)
end
-- Decide whether a claimed QUEUED task may start now: take its slots and tokens (nil), or
-- park it in its first full group's line / schedule it for its next token ('waiting').
-- f: record fields name, lim, lw, lp, lws, band, idem.
local function admit(tk, id, qi, f)
  local conc, rates = flow_groups(qi, f.name, f.lim)
  if #conc == 0 and #rates == 0 then
    -- Woken for a queue limit cleared since: give that slot on, then start unlimited.
    release(tk, id, qi, f.name, f.lim, nil, f.lw)
    return nil
  end
  local mine = waiter_seq(f.lw)
  local held = qkey(qi, Q_HELD)
  local function hand_back(except)  -- slots handed to this task that it will not use now
    for _, c in ipairs(conc) do
      if c.g ~= except and redis.call('ZREM', held, c.g .. '\0' .. id) == 1 then
        wake(qi, c.g, c.max)
      end
    end
  end
  local function wait_note(reason, state, extra)
    local fields = {'delivery', '', 'waiting', reason}
    if not f.lws or f.lws == '' then fields[#fields + 1], fields[#fields + 2] = 'lws', NOW end
    for i = 1, #extra do fields[#fields + 1] = extra[i] end
    emit('TASK_WAITING', id, qi, state, 0, {reason = reason})
    count(qi, 'limit_waits')
    return fields
  end
  for _, c in ipairs(conc) do
    if not redis.call('ZSCORE', held, c.g .. '\0' .. id) then
      local head = first_waiter(qi, c.g)
      local used = held_count(qi, c.g)
      if (head and (not mine or waiter_seq(head) < mine)) or used >= c.max then
        local seq = mine or string.format('%012d', redis.call('HINCRBY', qkey(qi, Q_LIMITS), 'seq', 1))
        local member = c.g .. '\0' .. seq .. '\0' .. id .. '\0' .. f.band .. '\0' .. (f.idem or '')
        redis.call('ZADD', qkey(qi, Q_WAIT), 0, member)
        hand_back(c.g)
        local reason = 'waiting: concurrency ' .. used .. '/' .. c.max .. ' on ' .. c.label
        local more = {'lw', member, 'lp', '', 'opt', '1'}  -- opt: claim_entry reads lw
        redis.call('HSET', tk, unpack(wait_note(reason, 'QUEUED', more)))
        return 'waiting'
      end
    end
  end
  if #rates > 0 then
    local meters = qkey(qi, Q_RATE)
    if not pruned[qi] then  -- full meters (score in the past) are as if never used
      redis.call('ZREMRANGEBYSCORE', meters, '-inf', NOW)
      pruned[qi] = true
    end
    -- Two GCRA meters per rate group: the line ('<group>') hands out tokens in order, paid
    -- ahead by refused tasks; the start guard ('><group>') meters the starts themselves, so a
    -- task that comes late to its token (a busy fleet) never starts closer to the last than
    -- the rate allows. A task the guard refuses keeps its paid token and is scheduled again.
    local function meter(prefix, at)
      local due, tats, why = at, {}, nil
      for i, r in ipairs(rates) do
        tats[i] = math.max(tonumber(redis.call('ZSCORE', meters, prefix .. r.g)) or 0, at)
        if tats[i] - r.slack > due then due, why = tats[i] - r.slack, r.label end
      end
      return due, tats, why
    end
    local function take(prefix, tats, at)
      for i, r in ipairs(rates) do
        redis.call('ZADD', meters, math.max(tats[i], at) + r.step, prefix .. r.g)
      end
    end
    local function schedule(due, why)
      due = math.ceil(due)
      hand_back(nil)
      local reason = 'waiting: ' .. why .. ', next start at ' .. due
      move(tk, id, qi, 'QUEUED', 'PENDING',
        wait_note(reason, 'PENDING', {'lp', due, 'lw', '', 'run_after', due}))
      zset(KEYS[K_SCHEDULE], id, due)
      return 'waiting'
    end
    if not (f.lp and f.lp ~= '' and tonumber(f.lp) <= NOW) then  -- no token paid yet
      local due, tats, why = meter('', NOW)
      take('', tats, due)
      if due > NOW then return schedule(due, why) end
    end
    local due, tats, why = meter('>', NOW)
    if due > NOW then return schedule(due, why) end
    take('>', tats, NOW)
  end
  -- Not zset(): later tasks of this very call count these slots.
  for _, c in ipairs(conc) do redis.call('ZADD', held, 0, c.g .. '\0' .. id) end
  if f.lws and f.lws ~= '' then observe(qi, 'limit_wait', NOW - tonumber(f.lws)) end
  redis.call('HSET', tk, 'lh', '1', 'lw', '', 'lp', '', 'waiting', '', 'lws', '')
  return nil
end

-- Refresh the idempotency record when its task reaches a terminal state. idem is the
-- record's idem field when the caller read it already (nil: read it here).
-- A caller that did not know the key passes the record itself as ik (layout.task_block):
-- never write the outcome into the task record then.
local function settle_idempotency(tk, ik, outcome, idem)
  if idem == nil then idem = redis.call('HGET', tk, 'idem') end
  if idem and idem ~= '' and ik ~= tk then
    redis.call('HSET', ik, 'state', outcome)
    redis.call('EXPIRE', ik, IDEM_TTL)
  end
end

-- Send a task to the DLQ (or FAILED when the DLQ is off); error_json is {class, message}.
-- Forget a task's DLQ index entry when it still names this entry (the task may have been
-- dead-lettered again since, under a new entry id).
local function dlq_unindex(id, qi, eid)
  if redis.call('HGET', KEYS[K_DLQIX], id) == qname(qi) .. ' ' .. eid then
    redis.call('HDEL', KEYS[K_DLQIX], id)
  end
end

local function dead_letter(tk, ik, id, qi, old, use_dlq, error_json)
  local r = redis.call('HMGET', tk, 'name', 'payload', 'attempt', 'queue', 'priority', 'band',
    'max_attempts', 'timeout', 'retry', 'idem', 'created_at')
  redis.call('HSET', tk, 'error', error_json, 'delivery', '')
  if use_dlq == '1' then
    -- The entry carries what a replay needs to rebuild the task after its record expired.
    local did = redis.call('XADD', qkey(qi, Q_DLQ), '*', 't', id, 'name', r[1], 'payload', r[2],
      'queue', r[4], 'attempts', r[3], 'error', error_json, 'at', NOW, 'priority', r[5] or 0,
      'band', r[6] or 1, 'max_attempts', r[7] or 1, 'timeout', r[8] or '', 'retry', r[9] or '{}',
      'idem', r[10] or '', 'created_at', r[11] or NOW)
    redis.call('HSET', tk, 'dlq', did)
    redis.call('HSET', KEYS[K_DLQIX], id, qname(qi) .. ' ' .. did)
    move(tk, id, qi, old, 'DEAD_LETTERED')
    emit('TASK_DEAD_LETTERED', id, qi, 'DEAD_LETTERED', r[3])
  else
    move(tk, id, qi, old, 'FAILED')
    emit('TASK_FAILED', id, qi, 'FAILED', r[3])
  end
  settle_idempotency(tk, ik, 'failed')
end

-- Take a RUNNING task away from a worker that stopped renewing its lease.
-- The reclaim counts as an attempt: exhausted tasks go to the DLQ with a worker-lost error.
local function reclaim_lost(tk, ik, id, qi, use_dlq)
  local r = redis.call('HMGET', tk, 'attempt', 'max_attempts', 'band', 'delivery', 'worker',
    'started_at', 'name', 'lim', 'lh')
  local attempt, max_attempts, band, eid = tonumber(r[1]), tonumber(r[2]), r[3], r[4]
  local message = 'worker ' .. (r[5] or '?') .. ' stopped renewing its lease'
  -- History times are epoch seconds, like the worker's own entries (the record keeps ms).
  add_history(tk, cjson.encode({attempt = attempt, worker = r[5],
    started_at = (tonumber(r[6]) or NOW) / 1000, ended_at = NOW / 1000, outcome = 'lost',
    error = 'dtq.WorkerLost', message = message}))
  redis.call('HDEL', tk, 'lease')  -- move() below takes it out of the RUNNING index
  release(tk, id, qi, r[7], r[8], r[9], nil)  -- a dead worker's slots free with its lease
  ack(qi, band, eid)
  count(qi, 'reclaimed')
  local err = cjson.encode({class = 'dtq.WorkerLost', message = message})
  if attempt >= max_attempts then
    dead_letter(tk, ik, id, qi, 'RUNNING', use_dlq, err)
    return 'dead'
  end
  redis.call('HSET', tk, 'error', err)
  deliver(tk, id, qi, band, attempt + 1)
  move(tk, id, qi, 'RUNNING', 'QUEUED')
  emit('TASK_RECLAIMED', id, qi, 'QUEUED', attempt, {worker = r[5]})
  return 'requeued'
end

-- Workflows (dtq/engine/workflows.py). A call that may finish workflow members passes, after
-- its task blocks, WB keys per workflow: its hash, its ready set (members whose inputs are
-- all in), the shard's due set (zset workflow id -> when an advance should look at it); and
-- an ARGV trailer read by wf_args(at): the number of workflows, their ids in block order,
-- then (when there are any) two fields per task block: its workflow block index (0: not a
-- member) and its member index in that workflow (the payload's 'wfm').
local WB = 3
local wf_ids, wf_of, wf_m = {}, {}, {}
local function wf_args(at)
  local nw = tonumber(ARGV[at] or '0') or 0
  for wi = 1, nw do wf_ids[wi] = ARGV[at + wi] end
  if nw > 0 then
    for ti = 1, NT do
      wf_of[ti], wf_m[ti] = tonumber(ARGV[at + nw + 2 * ti - 1]), ARGV[at + nw + 2 * ti]
    end
  end
end
local function wkey(wi, offset) return KEYS[NSHARED + NQ * QB + NT * TB + (wi - 1) * WB + offset] end

-- Count a member's final state in its workflow: the fan-in. Called by every script that
-- writes a final state, in the same call, so the count and the state cannot part. The
-- member's own field s:<m> is the guard that makes it exact: a state seen already (a resend,
-- a duplicate, a sweep that looks again) changes nothing, and a member counts once towards
-- 'done' and towards each dependent's need n:<w> however often it is noted. A dependent
-- whose need reaches 0 joins the ready set once; workflows.advance submits it (by its fixed
-- task id, so a second submit is absorbed by submit.lua). The one change after a first final
-- state: a failed member that succeeds after all (a DLQ replay) resumes what it held back.
-- Members a stop cancelled (workflows.advance marks them x:m before cancelling) are counted
-- in 'halted' when they end CANCELLED; once every other failure succeeded after all, they
-- are released again (wf_rerun), so a stopped group or chord resumes too.
local WF_FINAL = {SUCCEEDED = true, FAILED = true, DEAD_LETTERED = true, CANCELLED = true,
  EXPIRED = true}
local ID_ALPHABET = '0123456789abcdefghjkmnpqrstvwxyz'  -- dtq/engine/ids.py's
-- A new task id for a member run again: NOW's 10 characters, then the old id's shard and
-- random part (ids.py's layout), so it is unique and in the same hash slot.
local function wf_new_id(old)
  local head, n = {}, NOW
  for i = 10, 1, -1 do
    local d = n % 32
    head[i] = ID_ALPHABET:sub(d + 1, d + 1)
    n = (n - d) / 32
  end
  return table.concat(head) .. old:sub(11)
end
-- Release again, under new task ids, the members a stop cancelled (s:m CANCELLED with x:m
-- set): they count as not done, their old tasks' notes no longer match t:m. Return how many.
-- Scans the members once: it runs only when a stopped workflow resumes.
local function wf_rerun(wi, wk, total)
  local rerun = 0
  for first = 0, total - 1, 500 do
    local last = math.min(first + 499, total - 1)
    local names = {}
    for m = first, last do
      names[#names + 1], names[#names + 2], names[#names + 3] = 'x:' .. m, 's:' .. m, 't:' .. m
    end
    local v = redis.call('HMGET', wk, unpack(names))
    for m = first, last do
      local b = 3 * (m - first)
      if v[b + 1] == '1' and v[b + 2] == 'CANCELLED' then
        redis.call('HDEL', wk, 'x:' .. m, 's:' .. m, 'e:' .. m, 'q:' .. m)
        redis.call('HSET', wk, 't:' .. m, wf_new_id(v[b + 3]))
        redis.call('SADD', wkey(wi, 2), m)  -- its inputs were all in: it had been submitted
        rerun = rerun + 1
      end
    end
  end
  return rerun
end
local function wf_note(ti, id, qi, state, data)
  local wi = wf_of[ti]
  if not wi or wi == 0 or not WF_FINAL[state] then return end
  local wk, wid, m = wkey(wi, 1), wf_ids[wi], wf_m[ti]
  local r = redis.call('HMGET', wk, 's:' .. m, 'policy', 'state', 'd:' .. m, 'total', 'done',
    'bad', 't:' .. m, 'x:' .. m, 'halted')
  if r[8] ~= id then return end  -- not this member of this workflow, or the workflow expired
  local prev, policy, wstate = r[1], r[2], r[3]
  if prev == state or prev == 'SUCCEEDED' then return end
  local ok = state == 'SUCCEEDED'
  if prev and not ok then
    redis.call('HSET', wk, 's:' .. m, state)  -- one failure after another: counted already
    return
  end
  redis.call('HSET', wk, 's:' .. m, state, (ok and 'r:' or 'e:') .. m, data or 'null')
  local done, bad, release = tonumber(r[6]) or 0, tonumber(r[7]) or 0, false
  if not prev then
    done = redis.call('HINCRBY', wk, 'done', 1)
    if not ok then bad = redis.call('HINCRBY', wk, 'bad', 1) end
    release = ok or policy == 'continue'
    if state == 'CANCELLED' and r[9] == '1' then redis.call('HINCRBY', wk, 'halted', 1) end
  else
    bad = redis.call('HINCRBY', wk, 'bad', -1)
    release = policy ~= 'continue'  -- under 'stop' its dependents waited for this success
    local halted = tonumber(r[10]) or 0
    if release and halted > 0 and bad == halted then  -- the last real failure is fixed
      local rerun = wf_rerun(wi, wk, tonumber(r[5]))
      done = redis.call('HINCRBY', wk, 'done', -rerun)
      bad = redis.call('HINCRBY', wk, 'bad', -rerun)
      redis.call('HSET', wk, 'halted', 0)
    end
  end
  if release and r[4] and r[4] ~= '' then
    for w in string.gmatch(r[4], '[^,]+') do
      if redis.call('HINCRBY', wk, 'n:' .. w, -1) == 0 then redis.call('SADD', wkey(wi, 2), w) end
    end
  end
  local new = wstate
  if wstate ~= 'CANCELLED' then
    if done >= tonumber(r[5]) then
      new = bad == 0 and 'SUCCEEDED' or 'FAILED'
    elseif bad > 0 and policy ~= 'continue' then
      new = 'FAILED'  -- stopped: advance cancels the members still running, releases no more
    elseif bad == 0 then
      new = 'RUNNING'
    end
  end
  if new ~= wstate then
    redis.call('HSET', wk, 'state', new, 'updated_at', NOW)
    if new == 'RUNNING' then
      redis.call('PERSIST', wk)
      redis.call('PERSIST', wkey(wi, 2))
    else
      redis.call('EXPIRE', wk, RETENTION)
      redis.call('EXPIRE', wkey(wi, 2), RETENTION)
    end
    emit('WORKFLOW_' .. new, id, qi, new, 0, {workflow = wid})
  end
  zset(wkey(wi, 3), wid, NOW)  -- an advance should look now
end

-- Reading (read.lua, take.lua): up to `want` new entries for `consumer`, in strict priority
-- order (band 0 of every open queue, then band 1, then band 2), skipping paused queues.
-- XREADGROUP's COUNT is per stream, so counting here is what bounds prefetch to capacity.
-- Calls each(qi, band, entry id, task id or '', idempotency key or '') per entry read;
-- returns open (qi -> not paused) and how many entries were read. paused, when given, is
-- filled with qi -> paused (claim_paused: the claims of the same call need not ask again).
-- read_delivered reads instead what a blocking XREADGROUP sent just before in the same
-- pipeline delivered to `consumer`: its pending entries after after[s] (the newest id the
-- worker knew of stream s, '' for a stream it did not watch), up to `want` through each and
-- the rest through over (left for claim.lua: the blocking read's COUNT is per stream).
local function read_stream(consumer, stream, n, from)
  local ok, res = pcall(redis.call, 'XREADGROUP', 'GROUP', GROUP, consumer, 'COUNT', n,
    'STREAMS', stream, from or '>')
  if not ok then
    -- NOGROUP: the stream or group is new (or Redis lost its data); create it and read again.
    redis.pcall('XGROUP', 'CREATE', stream, GROUP, '0', 'MKSTREAM')
    res = redis.call('XREADGROUP', 'GROUP', GROUP, consumer, 'COUNT', n, 'STREAMS', stream,
      from or '>')
  end
  if not res then return {} end
  return res[1][2]
end
local function entry_task(e)  -- task id and idempotency key ('' when absent or deleted)
  local task_id, idem = '', ''
  local f = e[2]
  if type(f) ~= 'table' then return task_id, idem end
  for i = 1, #f, 2 do
    if f[i] == 't' then task_id = f[i + 1] elseif f[i] == 'i' then idem = f[i + 1] end
  end
  return task_id, idem
end
local function read_new(consumer, want, each, paused)
  local open, nread = {}, 0
  for qi = 1, NQ do
    open[qi] = redis.call('SISMEMBER', KEYS[K_PAUSED], qname(qi)) == 0
    if paused then paused[qi] = not open[qi] end
  end
  for band = 0, 2 do
    for qi = 1, NQ do
      if want > nread and open[qi] then
        for _, e in ipairs(read_stream(consumer, stream_key(qi, band), want - nread)) do
          each(qi, band, e[1], entry_task(e))
          nread = nread + 1
        end
      end
    end
  end
  return open, nread
end
local function read_delivered(consumer, after, want, each, over)
  local nread = 0
  for band = 0, 2 do
    for qi = 1, NQ do
      local from = after[(qi - 1) * 3 + band + 1]
      if from and from ~= '' then
        for _, e in ipairs(read_stream(consumer, stream_key(qi, band), 1000, from)) do
          if nread < want then
            each(qi, band, e[1], entry_task(e))
            nread = nread + 1
          else
            over(qi, band, e[1], entry_task(e))
          end
        end
      end
    end
  end
  return nread
end

-- Claiming (claim.lua, take.lua): turn an entry just read by this worker into a RUNNING
-- attempt, or absorb it. claim_begin once per call, then claim_entry per entry (tk, ik: its
-- task's record and idempotency record, or the record again when it has no key); each
-- claimed attempt is appended to CLAIMED (the gateway's CLAIMED fields, reply_claimed).
-- token (take.lua's request token, or nil) is written in each record claimed, as 'take'.
-- An entry is claimable only if the task is QUEUED and the entry is its current delivery;
-- anything else (stale duplicate, task finished, cancelled, or gone) is acknowledged and
-- counted as absorbed, and never reaches a handler. One exception: the entry this very worker
-- claimed already (the same call sent again) is handed back with its attempt unchanged.
-- Flow control (admit above): a task over a concurrency limit is acknowledged and waits in
-- its group's line (still QUEUED, no attempt counted); one over a rate is scheduled
-- (PENDING) for its next token. The entry a released slot adds for a waiter is its delivery.
local CLAIMED = {}
local claim_paused = {}  -- qi -> whether its queue is paused (read once per call)
local claim_worker, claim_lease_at, claim_started_by, claim_token
local function claim_begin(worker, lease_ms, token)
  BATCH = true  -- sorted-set writes and acknowledgements go out once per key
  claim_worker, claim_token = worker, token
  claim_lease_at = string.format('%d', NOW + lease_ms)  -- formatted once (NOW_S)
  -- The start event's worker field, encoded once per call (event() takes it as is).
  claim_started_by = ',"worker":' .. cjson.encode(worker)
end
local function claim_is_paused(qi)
  if claim_paused[qi] == nil then
    claim_paused[qi] = redis.call('SISMEMBER', KEYS[K_PAUSED], qname(qi)) == 1
  end
  return claim_paused[qi]
end
-- Whether flow control holds this task back (admit), with the limit fields only a limited
-- task has read here.
local function claim_limited(tk, id, qi, band, name, lim, lw, idem)
  local f = redis.call('HMGET', tk, 'lp', 'lws')
  return admit(tk, id, qi, {name = name, lim = lim, lw = lw, lp = f[1], lws = f[2],
    band = band, idem = idem})
end
-- A record's attempt digits -> the next attempt's (no tonumber or string.format per claim,
-- ~3.5 kIr; a library keeps the table from call to call).
local NEXT_ATTEMPT = {['0'] = '1', ['1'] = '2', ['2'] = '3'}
local function attempt_after(a)
  local n = NEXT_ATTEMPT[a]
  if not n then
    n = string.format('%d', (tonumber(a) or 0) + 1)
    NEXT_ATTEMPT[a] = n
  end
  return n
end
-- guarded (take.lua, whose task keys are not declared): the record's first read is a pcall,
-- and false is returned, with nothing written, when it fails (on a Redis Cluster, a key the
-- slot's live migration has moved already); the entry is then left to claim.lua.
local function claim_entry(qi, band, eid, tk, ik, guarded)
  -- What the hot path needs, and no more: each field read costs ~2.4 kIr (its reply to Lua)
  -- and a scan of the record (one it lacks scans it all). So the task id comes from the key
  -- (tk ends with it), and the optional fields are read only when the record's 'opt' is not
  -- '' (submit writes it, '1' with any of them; cancel.lua and admit set it with theirs; a
  -- record without it, written before it existed or rebuilt by replay.lua, is read whole).
  local call = guarded and redis.pcall or redis.call
  local r = call('HMGET', tk, 'state', 'delivery', 'attempt', 'band', 'queue', 'name',
    'payload', 'max_attempts', 'retry', 'enqueued_at', 'opt')
  if r.err then return false end
  local state, delivery, attempt, name = r[1], r[2], r[3], r[6]
  local id = state and string.sub(tk, -22)  -- ids.py: 22 characters, at the key's end
  local expires_at, timeout, idem, cancel, lim, lw = nil, nil, '', nil, nil, nil
  if r[11] ~= '' then
    local o = redis.call('HMGET', tk, 'expires_at', 'timeout', 'idem', 'cancel', 'lim', 'lw')
    expires_at, timeout, idem, cancel, lim, lw = o[1], o[2], o[3] or '', o[4], o[5], o[6]
  end
  -- Entry ids are unique per stream only: the delivery is this entry of this stream.
  local here = r[4] == band and r[5] == qname(qi)
  local current = delivery == eid and here
  if not current and here and state == 'QUEUED' and delivery == '' and woken(qi, lw) then
    redis.call('HSET', tk, 'delivery', eid)  -- the entry a released slot added for it
    current = true
  end
  local mine = state == 'RUNNING' and current and
    redis.call('HMGET', tk, 'worker', 'lease', 'started_at')
  if mine and mine[1] == claim_worker then
    -- redis-py resent this call because a dropped connection lost its reply (Redis restarted
    -- after the claim). A worker never reads an entry twice, so this is that claim: absorbing
    -- it would leave the attempt unrun until its lease ran out. Hand it back, lease renewed,
    -- while the lease runs; one that ran out (the worker was stopped that long) is left to
    -- the reaper, as any attempt of a worker gone that long: no handler starts after its
    -- lease ran out.
    if tonumber(mine[2] or '0') > NOW then
      redis.call('HSET', tk, 'lease', claim_lease_at)
      zset(qkey(qi, IX.RUNNING), id, claim_lease_at)
      -- The record's attempt digits and claim time, as the first claim sent them.
      reply_claimed(CLAIMED, id, eid, qi, band, name, r[7], attempt, r[8], timeout,
        r[9] or '{}', idem, r[10], mine[3])
    end
  elseif state ~= 'QUEUED' or not current then
    ack(qi, band, eid)
    count(qi, 'absorbed')
    emit('TASK_DUPLICATE_ABSORBED', id or '', qi, state or 'GONE', attempt, {entry = eid})
  elseif claim_is_paused(qi) then
    -- A blocking read that began before the queue was paused: give the entry back.
    ack(qi, band, eid)
    deliver(tk, id, qi, band, tonumber(attempt) + 1)
  elseif tonumber(expires_at or 0) > 0 and NOW >= tonumber(expires_at) then
    ack(qi, band, eid)
    release(tk, id, qi, name, lim, nil, lw)  -- a slot handed to it while it waited
    move(tk, id, qi, 'QUEUED', 'EXPIRED', {'delivery', ''})
    emit('TASK_EXPIRED', id, qi, 'EXPIRED', attempt)
    settle_idempotency(tk, ik, 'failed', idem)
  elseif cancel == '1' then
    -- Cancel was requested while an earlier attempt ran, and that attempt was reclaimed:
    -- honour the request instead of starting the task again.
    ack(qi, band, eid)
    release(tk, id, qi, name, lim, nil, lw)
    move(tk, id, qi, 'QUEUED', 'CANCELLED', {'delivery', ''})
    emit('TASK_CANCELLED', id, qi, 'CANCELLED', attempt)
    settle_idempotency(tk, ik, 'failed', idem)
  elseif (lim or (lw and lw ~= '') or queue_limits(qi)) and
      claim_limited(tk, id, qi, band, name, lim, lw, idem) then
    ack(qi, band, eid)  -- it waits for a slot or a token (admit recorded where)
  else
    local started = attempt_after(attempt)
    -- The hot path, written directly: what move(QUEUED -> RUNNING) writes, without its
    -- generic tables, and no updated_at: while it runs, that is started_at (decode_record).
    -- Fields new to the record go in the order later reads want them (started_at first).
    if claim_token then
      redis.call('HSET', tk, 'state', 'RUNNING', 'attempt', started, 'started_at', NOW_S,
        'lease', claim_lease_at, 'worker', claim_worker, 'take', claim_token)
    else
      redis.call('HSET', tk, 'state', 'RUNNING', 'attempt', started, 'started_at', NOW_S,
        'lease', claim_lease_at, 'worker', claim_worker)
    end
    zset(qkey(qi, IX.QUEUED), id, false)
    zset(qkey(qi, IX.RUNNING), id, claim_lease_at)  -- the reaper's: by lease deadline
    count(qi, COUNTER.RUNNING)
    event_of_many('TASK_STARTED', id, qi, 'RUNNING', started, claim_started_by)  -- digits
    -- The worker counts the wait histogram from the last two (dtq/engine/latency.py).
    reply_claimed(CLAIMED, id, eid, qi, band, name, r[7], started, r[8], timeout,
      r[9] or '{}', idem, r[10], NOW_S)
  end
  return true
end
