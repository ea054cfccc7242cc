-- Atomic admission of one holder to every given quota key: named leases, so a crashed holder's
-- slot comes back by timeout instead of leaking like an INCR/DECR counter.
--
-- KEYS, three per quota key i (same order as the limits in ARGV):
--   leases  ZSET member = holder, score = last heartbeat (server ms)
--   waiters ZSET member = holder, score = arrival ticket (server ms, kept across polls)
--   seen    ZSET member = holder, score = the waiter's last poll (server ms)
-- ARGV[1] holder id, ARGV[2] lease timeout ms, ARGV[3] waiter timeout ms,
-- ARGV[4] "1" = join (or keep a place in) the waiter queue when refused, "0" = only try,
-- ARGV[5..] per quota key 1..n: limit, slack; then per budget 1..m: limit, amount, floor, ttl
-- ms; the LAST ARGV is m (0 = no budgets). KEYS after the quota keys' triples, three per budget j:
--   reservations ZSET member = holder, score = last heartbeat (server ms), renewed with the lease
--   amounts      HASH holder -> reserved amount (integer nano-USD)
--   spent        STRING settled spend (integer nano-USD), moved only by settle.lua
--
-- Admitted only if, on EVERY key, the holder already holds (idempotent retry: same id, no
-- second slot) or there is a free slot and fewer than `free + slack` live waiters are queued
-- ahead of it. Then ZADD on all keys at once; otherwise nothing is added anywhere.
-- slack 0 = strict arrival order; a small slack lets an awake waiter near the head take a slot
-- the sleeping head would leave idle until its next poll (utilization vs. order, docs/quota.md).
-- Returns {1, now_ms, 0, 0, 0} or {0, now_ms, i, ahead, free}: i = first refusing key (1-based),
-- ahead = waiters queued before this holder there, free = its free slots; or {2, now_ms, j,
-- spent, reserved}: the slots were free but budget j is used up (spent + reserved by others >=
-- its limit), nothing added anywhere. A budget admits a call while what is settled plus what
-- is reserved is under its limit, and then reserves the call's worst case: so the spend passes a
-- limit by at most one call's reservation (docs/quota.md, "Budgets: reserve, then settle").
-- Reservations expire like leases (same timeout, renewed by renew.lua with the holder's lease),
-- so a killed holder's reservation comes back by itself.

-- clock:begin (the only clock; test/integration/quota-property.test.ts swaps this block)
-- One TIME call gives both: whole ms, and the sub-millisecond part in [0, 1) (an arrival
-- ticket's tie-breaker). Two calls could straddle a millisecond and give a ticket up to 1 ms
-- early, ahead of an earlier waiter's (CI: a re-polling w2 found itself ahead of w1).
local function clock_ms()
  local t = redis.call('TIME')
  local us = tonumber(t[2])
  return tonumber(t[1]) * 1000 + math.floor(us / 1000), (us % 1000) / 1000
end
-- clock:end

local holder = ARGV[1]
local lease_timeout = tonumber(ARGV[2])
local waiter_timeout = tonumber(ARGV[3])
local queue = ARGV[4] == '1'
local m = tonumber(ARGV[#ARGV])
local n = #KEYS / 3 - m
local now, now_sub = clock_ms()
local function fmt(x) return string.format('%d', x) end

-- Purge the dead first, then count: expired leases and waiters that stopped polling.
for i = 1, n do
  local leases, waiters, seen = KEYS[3 * i - 2], KEYS[3 * i - 1], KEYS[3 * i]
  redis.call('ZREMRANGEBYSCORE', leases, '-inf', '(' .. fmt(now - lease_timeout))
  local stale = redis.call('ZRANGEBYSCORE', seen, '-inf', '(' .. fmt(now - waiter_timeout))
  for _, w in ipairs(stale) do
    redis.call('ZREM', waiters, w)
    redis.call('ZREM', seen, w)
  end
end

local refused, ahead_at, free_at = 0, 0, 0
for i = 1, n do
  local leases, waiters = KEYS[3 * i - 2], KEYS[3 * i - 1]
  if not redis.call('ZSCORE', leases, holder) then
    local free = tonumber(ARGV[3 + 2 * i]) - redis.call('ZCARD', leases)
    local slack = tonumber(ARGV[4 + 2 * i])
    local ahead = redis.call('ZRANK', waiters, holder) or redis.call('ZCARD', waiters)
    if free <= 0 or ahead >= free + slack then
      refused, ahead_at, free_at = i, ahead, math.max(free, 0)
      break
    end
  end
end

-- Budgets, only once every slot is free: a refusal here ends the call rather than queueing it.
local budget_ttl = {}
if refused == 0 then
  for j = 1, m do
    local res, amt, spent = KEYS[3 * (n + j) - 2], KEYS[3 * (n + j) - 1], KEYS[3 * (n + j)]
    local base = 4 + 2 * n + 4 * (j - 1)
    local limit, floor = tonumber(ARGV[base + 1]), tonumber(ARGV[base + 3])
    budget_ttl[j] = ARGV[base + 4]
    local dead = redis.call('ZRANGEBYSCORE', res, '-inf', '(' .. fmt(now - lease_timeout))
    for _, d in ipairs(dead) do
      redis.call('ZREM', res, d)
      redis.call('HDEL', amt, d)
    end
    if not redis.call('ZSCORE', res, holder) then
      -- Redis is the accelerator, Postgres the ledger: a counter lost with Redis's data starts
      -- again from the ledger's figure the caller read (floor), never from 0.
      local s = tonumber(redis.call('GET', spent) or '0')
      if floor > s then
        redis.call('SET', spent, fmt(floor), 'PX', budget_ttl[j])
        s = floor
      end
      local reserved = 0
      for _, h in ipairs(redis.call('ZRANGE', res, 0, -1)) do
        reserved = reserved + tonumber(redis.call('HGET', amt, h) or '0')
      end
      if s + reserved >= limit then
        return {2, now, j, s, reserved}
      end
    end
  end
end

if refused == 0 then
  for j = 1, m do
    local res, amt = KEYS[3 * (n + j) - 2], KEYS[3 * (n + j) - 1]
    local amount = ARGV[4 + 2 * n + 4 * (j - 1) + 2]
    redis.call('ZADD', res, fmt(now), holder)
    redis.call('HSET', amt, holder, amount)
    redis.call('PEXPIRE', res, budget_ttl[j])
    redis.call('PEXPIRE', amt, budget_ttl[j])
  end
  for i = 1, n do
    redis.call('ZADD', KEYS[3 * i - 2], fmt(now), holder)
    redis.call('ZREM', KEYS[3 * i - 1], holder)
    redis.call('ZREM', KEYS[3 * i], holder)
  end
  return {1, now, 0, 0, 0}
end

if queue then
  -- A waiter queues only where it was refused and keeps one ticket (its first arrival) as it
  -- moves between keys: a waiter blocked by its tenant's key does not hold a place in the
  -- model's queue (no head-of-line blocking), and any two waiters compare the same way in
  -- every queue, so multi-key waiters cannot block each other in a cycle.
  -- A ticket carries the arrival's microseconds: whole milliseconds tied waiters that arrived in
  -- the same one, and a ZSET orders ties by member, so "r10" went before "r5" (CI: strict order
  -- measured at Kendall tau 0.83, waiters 10 and 11 admitted ahead of 5 to 9). Scripts run one at
  -- a time, so each gets its own microsecond; at ~1.7e12 ms a double still resolves 1/4096 ms.
  local ticket = now + now_sub
  for i = 1, n do
    local s = redis.call('ZSCORE', KEYS[3 * i - 1], holder)
    if s and tonumber(s) < ticket then ticket = tonumber(s) end
  end
  for i = 1, n do
    if i == refused then
      redis.call('ZADD', KEYS[3 * i - 1], string.format('%.3f', ticket), holder)
      redis.call('ZADD', KEYS[3 * i], fmt(now), holder)
    else
      redis.call('ZREM', KEYS[3 * i - 1], holder)
      redis.call('ZREM', KEYS[3 * i], holder)
    end
  end
  ahead_at = redis.call('ZRANK', KEYS[3 * refused - 1], holder)
end
return {0, now, refused, ahead_at, free_at}
