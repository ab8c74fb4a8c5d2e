-- op_renew.lua: extend the processing lease of an idempotent operation this attempt holds.
-- KEYS: lib layout with no queue or task blocks, then the operation record (hash)
-- ARGV after the header: 1 token of this attempt, 2 processing lease (ms)
-- Reply: 1 renewed, 0 the lease is no longer ours (it ran out, or the operation finished)
-- Resend: renewing again: the same answer.
local ok = KEYS[NSHARED + 1]
local token, lease_ms = ARGV[ARG0 + 1], tonumber(ARGV[ARG0 + 2])
local r = redis.call('HMGET', ok, 'state', 'token')
if r[1] ~= 'processing' or r[2] ~= token then return 0 end
redis.call('PEXPIRE', ok, lease_ms)
return 1
