-- Batched lease renewal for many holders of one host: one call per host per heartbeat, and a
-- lease already purged is never re-added.
--
-- KEYS: every lease ZSET any of the holders holds (deduplicated).
-- ARGV[1] lease timeout ms, ARGV[2] number of holders h, then per holder:
--   holder id, k, then k 1-based indexes into KEYS (that holder's lease keys).
--
-- A holder is renewed (score = now on every key, ZADD XX) only if it is still present and
-- unexpired on ALL its keys. Otherwise it is lost: it is removed from all its keys (its other
-- slots free up now rather than at expiry) and never re-added: a purged lease is not resurrected.
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
  pos = pos + 2 + k
end
return lost
