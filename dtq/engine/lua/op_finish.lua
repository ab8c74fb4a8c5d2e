-- op_finish.lua: store an idempotent operation's result, or release its key after a failure.
-- KEYS: lib layout with no queue or task blocks, then the operation record (hash)
-- ARGV after the header: 1 token of this attempt, 2 outcome ('done' | 'failed'),
--   3 result JSON (done only), 4 ttl of the stored result (s)
-- Reply: {'stored', result} | {'kept', result stored earlier} | {'released'} | {'lost'}
-- The first result stored wins: an attempt whose lease ran out while it worked, and whose
-- operation another attempt then finished, gets that stored result back (kept). A failure
-- releases the key only while this attempt still holds it.
-- Resend: the stored record keeps the token, so 'done' sent again answers 'stored' (not
-- 'kept'); 'failed' sent again finds the key released and answers 'lost', which the caller
-- ignores.
local ok = KEYS[NSHARED + 1]
local token, outcome, result, ttl = ARGV[ARG0 + 1], ARGV[ARG0 + 2], ARGV[ARG0 + 3],
  tonumber(ARGV[ARG0 + 4])
local r = redis.call('HMGET', ok, 'state', 'token', 'result')
if outcome == 'done' then
  if r[1] == 'done' and r[2] == token then return {'stored', r[3]} end  -- sent again
  if r[1] == 'done' then return {'kept', r[3]} end
  redis.call('DEL', ok)
  redis.call('HSET', ok, 'state', 'done', 'result', result, 'finished_at', NOW, 'token', token)
  redis.call('EXPIRE', ok, ttl)
  return {'stored', result}
end
if r[1] == 'processing' and r[2] == token then
  redis.call('DEL', ok)
  return {'released'}
end
return {'lost'}
