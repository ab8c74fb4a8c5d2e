-- cancel.lua: cancel one task, or ask its worker to stop it.
-- KEYS: lib layout with the task's queue block and its task block (record, result,
--   idempotency record).
-- ARGV after the header: 1 reason, 2 token of this request, then lib.lua's workflow trailer
--   (wf_args): a member cancelled here is counted in its workflow in this call
-- Reply: {'cancelled'} waiting tasks (PENDING, QUEUED, RETRYING) at once |
--        {'requested'} a RUNNING task: its worker learns it from the renew.lua reply, and the
--          task ends CANCELLED only when the handler stops by raising TaskCancelled |
--        {'finished', state} already terminal | {'missing'} no such record |
--        {'moved', queue} the record belongs to another queue (replayed elsewhere since the
--          caller looked): call again with that queue's block
-- Resend: the record keeps the request's token (cancel_token), so the same call sent again
-- answers what the first did ('cancelled' or 'requested') and writes nothing more (its
-- workflow count included: wf_note runs only on the first send's path).
local reason, token = ARGV[ARG0 + 1], ARGV[ARG0 + 2]
wf_args(ARG0 + 3)
local tk, ik = tkey(1, T_RECORD), tkey(1, T_IDEM)
local r = redis.call('HMGET', tk, 'id', 'state', 'band', 'delivery', 'attempt', 'queue',
  'cancel_token', 'name', 'lim', 'lh', 'lw')
local id, state = r[1], r[2]
if not id then return {'missing'} end
if r[7] == token then return {state == 'RUNNING' and 'requested' or 'cancelled'} end
if TERMINAL[state] then return {'finished', state} end
if r[6] ~= qname(1) then return {'moved', r[6]} end
if state == 'RUNNING' then
  -- opt: a claim of its next delivery (after a reclaim) reads cancel (claim_entry).
  redis.call('HSET', tk, 'cancel', '1', 'cancel_reason', reason, 'cancel_token', token,
    'opt', '1')
  emit('TASK_CANCEL_REQUESTED', id, 1, state, r[5], {reason = reason})
  return {'requested'}
end
redis.call('ZREM', KEYS[K_SCHEDULE], id)
release(tk, id, 1, r[8], r[9], r[10], r[11])  -- leave a limit's waiting line, hand on its slot
-- A QUEUED task's entry may already sit in a worker's PEL: acknowledging it here makes that
-- worker's claim absorb it instead of running the task.
ack(1, r[3], r[4])
redis.call('HSET', tk, 'delivery', '', 'cancel_reason', reason, 'cancel_token', token,
  'error', cjson.encode({class = 'dtq.TaskCancelled', message = reason}))
move(tk, id, 1, state, 'CANCELLED')
emit('TASK_CANCELLED', id, 1, 'CANCELLED', r[5], {reason = reason})
settle_idempotency(tk, ik, 'failed')
wf_note(1, id, 1, 'CANCELLED', cjson.encode({class = 'dtq.TaskCancelled', message = reason}))
return {'cancelled'}
