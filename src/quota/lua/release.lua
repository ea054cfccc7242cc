-- Release of one holder's leases (and its place in any waiter queue): members are named, so a
-- late release cannot free another holder's slot.
--
-- KEYS, three per quota key: leases, waiters, seen (as in acquire.lua). ARGV[1] holder id.
-- ZREM only: releasing a lease that is already gone (expired, purged, released twice) is a
-- harmless no-op, and since members are named a late release can never free another holder's
-- slot. Returns how many lease entries were removed.
local removed = 0
for i = 1, #KEYS / 3 do
  removed = removed + redis.call('ZREM', KEYS[3 * i - 2], ARGV[1])
  redis.call('ZREM', KEYS[3 * i - 1], ARGV[1])
  redis.call('ZREM', KEYS[3 * i], ARGV[1])
end
return removed
