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
 */
import type { RedisKeys } from "./keys";
import type { Redis } from "./redis";

/** A wake entry outlives a host that died asleep by this much, then goes. */
export const WAKE_ENTRY_TTL_MS = 120_000;

/**
 * KEYS[1] the ready index, KEYS[2] the sleepers ZSET; ARGV[1] the wake-list key prefix, ARGV[2]
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
redis.call('DEL', KEYS[2])
for _, h in ipairs(hosts) do
  local k = ARGV[1] .. h
  redis.call('RPUSH', k, ARGV[2], ARGV[2])
  redis.call('PEXPIRE', k, ${WAKE_ENTRY_TTL_MS})
end
return #hosts
`;

/**
 * Sleep registration, one command: the host's stale wake entries go (a poke it no longer needs
 * would wake its next sleep at once) and it joins the sleepers until `untilMs`.
 * KEYS[1] the sleepers ZSET, KEYS[2] the host's wake list; ARGV[1] untilMs, ARGV[2] the host id.
 */
export const REGISTER_SLEEPER = `
redis.call('DEL', KEYS[2])
redis.call('ZADD', KEYS[1], ARGV[1], ARGV[2])
return 1
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
  return Number(await redis.eval(INDEX_AND_WAKE, [keys.readyIndex(), keys.sleepers()], args));
}

/** Whether any host is registered asleep with a sleep not yet over (the gateway's cron asks). */
export async function anySleeper(redis: Redis, keys: RedisKeys, now = Date.now()): Promise<boolean> {
  return (await redis.zcount(keys.sleepers(), now, "+inf")) > 0;
}
