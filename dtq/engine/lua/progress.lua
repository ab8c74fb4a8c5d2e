-- progress.lua: store the latest progress a running attempt reported, and announce it.
-- KEYS: lib layout with the task's queue block and its task block (record, result,
--   idempotency record).
-- ARGV after the header: 1 attempt, 2 progress JSON {fraction, message, at} (at: epoch s,
--   taken by the caller, so a resend carries the very same value)
-- Resend: answered 2 (already stored), no second event.
-- Reply: 1 stored | 0 refused: no record, another attempt, or not started | 2 already stored
--   (this call sent again: nothing written, no second event)
-- The fence is the attempt, not the RUNNING state: the last value a handler reported is
-- written also when the attempt finished in between (the reporter's trailing write).
local attempt, progress = ARGV[ARG0 + 1], ARGV[ARG0 + 2]
local tk = tkey(1, T_RECORD)
local r = redis.call('HMGET', tk, 'id', 'state', 'attempt', 'progress')
if not r[1] or r[3] ~= attempt or r[2] == 'QUEUED' or r[2] == 'PENDING' then return 0 end
if r[4] == progress then return 2 end
redis.call('HSET', tk, 'progress', progress)
emit('TASK_PROGRESS', r[1], 1, r[2], attempt, {progress = cjson.decode(progress)})
return 1
