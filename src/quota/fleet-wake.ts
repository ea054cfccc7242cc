/**
 * The wake-up of a sleeping fleet, through Redis only (no Postgres connection is needed to hear
 * it, and none is held while waiting for it). A host going to sleep (sandbox-host/lifecycle/sleep.ts)
 * registers in the sleepers ZSET and blocks on its own wake LIST (BLPOP, at most 60 s per command:
 * one command a minute while asleep). Whatever makes work for the fleet (a submit, a chat message,
 * a decision, a schedule created or changed, a webhook retry) runs INDEX_AND_WAKE: the ready-index
 * ZADD it already sent, plus one push per sleeping host, in the same one command. With no host
 * asleep the script is the ZADD and a ZRANGEBYSCORE on an empty key: a submit to a busy fleet
 * costs no extra command.
 *
 * Only an accelerator: every fact is in Postgres first. A lost poke is caught by the host's next
 * known deadline or its longest sleep (HOST_SLEEP_MAX_MS), never lost work.
 *
 * A host that sleeps while runs are held elsewhere (sandbox-host/lifecycle/held-watch.ts) is also
 * in the held sleepers ZSET: the cron does not skip its backstops for it (anySleeper), since a
 * held run may still need reaping, and the cron is the bound when no host is left to do it.
 */
import type { RedisKeys } from "./keys";
import type { Redis } from "./redis";

/** A wake entry outlives a host that died asleep by this much, then goes. */
export const WAKE_ENTRY_TTL_MS = 120_000;

/**
 * KEYS[1] the ready index, KEYS[2] the sleepers ZSET, KEYS[3] the held sleepers ZSET (emptied
 * with it: a poked host is awake); ARGV[1] the wake-list key prefix, ARGV[2]
 * now (ms), then score/member pairs for the ready index (none: a poke only). The per-host wake
 * lists are named inside the script (they are only known from the set it reads); Upstash runs a
 * database's scripts on one node, so that is allowed there. Returns how many hosts were poked.
 *
 * Two entries per host: a host woken by something else (a NOTIFY) stops waiting for its BLPOP's
 * answer, but Redis still holds that BLPOP until its timeout, first in line on the list. If the
 * host is asleep again meanwhile, one entry would go to that orphan and the host's live wait would
 * miss the poke; with two, each gets one. The spare is dropped when the host next registers.
 */
export const INDEX_AND_WAKE = `
for i = 3, #ARGV, 2 do redis.call('ZADD', KEYS[1], ARGV[i], ARGV[i + 1]) end
local hosts = redis.call('ZRANGEBYSCORE', KEYS[2], ARGV[2], '+inf')
if #hosts == 0 then return 0 end
redis.call('DEL', KEYS[2], KEYS[3])
for _, h in ipairs(hosts) do
  local k = ARGV[1] .. h
  redis.call('RPUSH', k, ARGV[2], ARGV[2])
  redis.call('PEXPIRE', k, ${WAKE_ENTRY_TTL_MS})
end
return #hosts
`;

/**
 * Sleep registration, one command: the host's stale wake entries go (a poke it no longer needs
 * would wake its next sleep at once) and it joins the sleepers until `untilMs`, and the held
 * sleepers too when its look found runs held (ARGV[3] '1'; else it leaves them).
 * KEYS[1] the sleepers ZSET, KEYS[2] the host's wake list, KEYS[3] the held sleepers ZSET;
 * ARGV[1] untilMs, ARGV[2] the host id, ARGV[3] '1' or '0'.
 */
export const REGISTER_SLEEPER = `
redis.call('DEL', KEYS[2])
redis.call('ZADD', KEYS[1], ARGV[1], ARGV[2])
if ARGV[3] == '1' then redis.call('ZADD', KEYS[3], ARGV[1], ARGV[2]) else redis.call('ZREM', KEYS[3], ARGV[2]) end
return 1
`;

/**
 * Removes a sleep's registration only if it is still that sleep's (its score): a removal that
 * lands late (the client retries with backoff) must not delete the next sleep's registration,
 * which would leave a host asleep that no poke reaches.
 * KEYS[1] the sleepers ZSET, KEYS[2] the held sleepers ZSET; ARGV[1] the score registered,
 * ARGV[2] the host id.
 */
export const UNREGISTER_SLEEPER = `
local removed = 0
for _, k in ipairs(KEYS) do
  local s = redis.call('ZSCORE', k, ARGV[2])
  if s and tonumber(s) == tonumber(ARGV[1]) then removed = removed + redis.call('ZREM', k, ARGV[2]) end
end
return removed
`;

/**
 * Whether the cron may skip its backstops: 1 when a host sleeps with its sleep not over and no
 * live registration says runs were held when it went to sleep. KEYS[1] the sleepers ZSET,
 * KEYS[2] the held sleepers ZSET; ARGV[1] now (ms).
 */
const CRON_MAY_SKIP = `
if redis.call('ZCOUNT', KEYS[2], ARGV[1], '+inf') > 0 then return 0 end
if redis.call('ZCOUNT', KEYS[1], ARGV[1], '+inf') > 0 then return 1 end
return 0
`;

/** The wake-list key prefix the script appends a host id to (keys.wake("")). */
function wakePrefix(keys: RedisKeys): string {
  return keys.wake("");
}

/**
 * Adds jobs to the ready index (scored by when each becomes runnable) and pokes every sleeping
 * host, in one command. `entries` may be empty: a poke only (a schedule changed).
 */
export async function indexAndWake(
  redis: Redis,
  keys: RedisKeys,
  entries: ReadonlyArray<{ score: number; member: string }>,
  now = Date.now(),
): Promise<number> {
  const args: string[] = [wakePrefix(keys), String(now)];
  for (const e of entries) args.push(String(e.score), e.member);
  return Number(await redis.eval(INDEX_AND_WAKE, [keys.readyIndex(), keys.sleepers(), keys.heldSleepers()], args));
}

/**
 * Whether any host is registered asleep with a sleep not yet over, none of them over held runs
 * (the gateway's cron asks, one command): such a host's look found nothing claimed, running,
 * waiting or due before it wakes, so the backstops have nothing to do.
 */
export async function anySleeper(redis: Redis, keys: RedisKeys, now = Date.now()): Promise<boolean> {
  return Number(await redis.eval(CRON_MAY_SKIP, [keys.sleepers(), keys.heldSleepers()], [String(now)])) === 1;
}
