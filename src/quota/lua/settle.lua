-- Settlement of one holder's budget reservations to what its call really cost: the reservation
-- goes and the real amount is added to each budget's spent counter, once.
--
-- KEYS[1] the holder's settled marker; then three per budget: reservations, amounts, spent (as
-- in acquire.lua). ARGV[1] holder id, ARGV[2] marker ttl ms, then per budget: amount (integer
-- nano-USD, the call's real cost), ttl ms of the spent counter.
--
-- Counted at most once per holder (SET NX on the marker): a settle retried after a lost reply,
-- or sent again by a recovering host, adds nothing. A reservation that expired before its
-- settle (a paused host) is still settled: the call happened and the provider billed it.
-- Returns 1 if the amounts were added, 0 if this holder was settled already.
local first = redis.call('SET', KEYS[1], '1', 'NX', 'PX', ARGV[2])
for j = 1, (#KEYS - 1) / 3 do
  local res, amt, spent = KEYS[3 * j - 1], KEYS[3 * j], KEYS[3 * j + 1]
  redis.call('ZREM', res, ARGV[1])
  redis.call('HDEL', amt, ARGV[1])
  if first then
    redis.call('INCRBY', spent, ARGV[1 + 2 * j])
    redis.call('PEXPIRE', spent, ARGV[2 + 2 * j])
  end
end
if first then return 1 end
return 0
