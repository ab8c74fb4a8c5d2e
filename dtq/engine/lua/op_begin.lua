-- op_begin.lua: start an idempotent operation, or find it done or running elsewhere.
-- KEYS: lib layout with no queue or task blocks, then the operation record (hash):
--   state ('processing' | 'done'), token, result (JSON), started_at, finished_at
-- ARGV after the header: 1 token of this attempt, 2 processing lease (ms)
-- Reply: {'acquired'} | {'done', result JSON} | {'busy', lease left (ms)}
-- The 'processing' state lives only as long as its lease, which the running attempt renews
-- (op_renew.lua): a process that dies mid-operation frees the key when the lease runs out.
-- Resend: the token is this attempt's, so the same call sent again finds its own lease and
-- answers 'acquired' again (renewed), never 'busy'.
local ok = KEYS[NSHARED + 1]
local token, lease_ms = ARGV[ARG0 + 1], tonumber(ARGV[ARG0 + 2])
local r = redis.call('HMGET', ok, 'state', 'result', 'token')
if r[1] == 'done' then return {'done', r[2]} end
if r[1] and r[3] == token then  -- this call sent again: the lease is ours already
  redis.call('PEXPIRE', ok, lease_ms)
  return {'acquired'}
end
if r[1] then return {'busy', redis.call('PTTL', ok)} end
redis.call('HSET', ok, 'state', 'processing', 'token', token, 'started_at', NOW)
redis.call('PEXPIRE', ok, lease_ms)
return {'acquired'}
