-- forget_consumer.lua: remove a consumer from the group of every stream of some queues, but
-- only where it holds no pending entry (deleting one that does would strand its entries).
-- KEYS: lib layout with one block per queue (no task blocks).
-- ARGV after the header: 1 consumer name
-- Reply: number of streams where the consumer still holds entries (0 = fully forgotten).
-- Resend: a consumer forgotten already is forgotten again (a no-op): the same answer.
local consumer = ARGV[ARG0 + 1]
local holding = 0
for qi = 1, NQ do
  for band = 0, 2 do
    local s = stream_key(qi, band)
    local ok, pending = pcall(redis.call, 'XPENDING', s, GROUP, '-', '+', 1, consumer)
    if ok then
      if #pending == 0 then
        redis.call('XGROUP', 'DELCONSUMER', s, GROUP, consumer)
      else
        holding = holding + 1
      end
    end
  end
end
return holding
