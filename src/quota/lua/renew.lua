-- Batched lease renewal for many holders of one host: one call per host per heartbeat, and a
-- lease already purged is never re-added.
--
-- KEYS: every lease ZSET any of the holders holds (deduplicated).
-- ARGV[1] lease timeout ms, ARGV[2] number of holders h, then per holder:
--   holder id, k, then k 1-based indexes into KEYS (that holder's lease keys),
--   r, then r indexes into KEYS (its budget reservation ZSETs, acquire.lua).
--
-- A holder is renewed (score = now on every key, ZADD XX) only if it is still present and
-- unexpired on ALL its keys. Otherwise it is lost: it is removed from all its keys (its other
-- slots free up now rather than at expiry) and never re-added: a purged lease is not resurrected.
-- A holder's budget reservations are renewed (ZADD XX) but never decide whether it is lost and
-- are never removed here: a lost slot stops the call, but what the call already cost is still to
-- be settled (settle.lua), and until then its reservation must keep counting against the budget.
-- Removing it with the slots let calls in under a budget that the stopped call then passed
-- (a renewal sent before a release and run after it: budget-reservations.test.ts, 5 calls under
-- a budget that holds 3). An expired reservation is purged by acquire.lua like a lease.
-- Returns the 1-based positions (in ARGV order) of the lost holders.

-- clock:begin (the only clock; test/integration/quota-property.test.ts swaps this block)
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
-- clock:end

local now = now_ms()
local cutoff = now - tonumber(ARGV[1])
local count = tonumber(ARGV[2])
local score = string.format('%d', now)
local lost = {}
local pos = 3
for h = 1, count do
  local holder = ARGV[pos]
  local k = tonumber(ARGV[pos + 1])
  local valid = true
  for j = 1, k do
    local s = redis.call('ZSCORE', KEYS[tonumber(ARGV[pos + 1 + j])], holder)
    if not s or tonumber(s) < cutoff then valid = false end
  end
  for j = 1, k do
    local key = KEYS[tonumber(ARGV[pos + 1 + j])]
    if valid then
      redis.call('ZADD', key, 'XX', score, holder)
    else
      redis.call('ZREM', key, holder)
    end
  end
  if not valid then lost[#lost + 1] = h end
  local r = tonumber(ARGV[pos + 2 + k])
  for j = 1, r do
    local res = KEYS[tonumber(ARGV[pos + 2 + k + j])]
    local held = redis.call('ZSCORE', res, holder)
    if held and tonumber(held) >= cutoff then redis.call('ZADD', res, 'XX', score, holder) end
  end
  pos = pos + 3 + k + r
end
return lost
