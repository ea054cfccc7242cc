/**
 * Request rate per API key on every /v1 route (after auth, so the key is known to be real; an
 * access token counts as the key that minted it, so minting tokens adds no budget):
 * @upstash/ratelimit's sliding window over the gateway's Upstash client, one EVALSHA per request.
 * Past the limit: 429 `rate_limited` with `Retry-After` (whole seconds until the window lets the
 * next request through).
 *
 * Fail open. The limit protects capacity; it holds no truth (the job row in Postgres is the
 * truth, Redis only wakes claimers), so Redis being down must not turn every request into an
 * error. A check that fails, or takes longer than CHECK_TIMEOUT_MS, lets the request through
 * and opens a per-isolate breaker: for BREAKER_OPEN_MS no Redis check is made, only the isolate's
 * own count below applies (one log line per opening). A refused connection fails in
 * milliseconds; a hung Redis delays the requests already waiting on it by up to the timeout, and
 * then none until the breaker closes. The timeout is generous on purpose: measured on this 2-core
 * machine under a 300-request burst, checks took ~2 s of queueing in a saturated gateway, and a
 * short timeout made the limiter let everything through exactly when it was needed
 * (docs/limits.md).
 *
 * Before Redis, each isolate counts the key's requests in the current fixed window itself. That
 * count is a lower bound of the global one, so a key past the limit in this isolate alone is
 * refused without asking Redis, and this holds while the Redis check is skipped or late: a burst
 * that saturates a gateway (1,500 requests at once on one workerd here: every Redis check came
 * back after its timeout) is still cut to the limit. In production, with many isolates, the Redis
 * count is what binds; the local one only ever refuses what Redis would refuse too.
 *
 * Blocked keys are remembered per isolate until their window resets (the library's ephemeral
 * cache), so a client hammering past its limit costs no Redis round trip per refused request.
 *
 * The same check counts chat WebSocket frames (checkKeyRate, called by ChatSessionObject for each
 * frame with the key that opened the socket): once upgraded, frames never pass this middleware,
 * and 2,000 `resume` frames were answered in 1.3 s, 300 `message` frames made 300 jobs.
 */

import { Ratelimit } from "@upstash/ratelimit";
import { createMiddleware } from "hono/factory";
import { ApiError } from "../../../src/contracts/errors";
import { redisKeys } from "../../../src/quota/keys";
import type { Redis } from "../../../src/quota/redis";
import type { GatewayConfig } from "../../gateway-config";
import { log } from "../../log";
import { timed } from "../../request-timing";
import type { GatewayEnv } from "../../types";

/** Longest wait for the check; a healthy Upstash answers in a few ms from a nearby region. */
export const CHECK_TIMEOUT_MS = 3_000;
/** After a failed or timed-out check, requests skip the check this long. */
export const BREAKER_OPEN_MS = 5_000;

/** Until when (ms) this isolate skips checks; 0 = closed. */
let breakerOpenUntil = 0;

function openBreaker(why: string, error?: unknown): void {
  breakerOpenUntil = Date.now() + BREAKER_OPEN_MS;
  log.warn(
    `rate limit check ${why}; only this isolate's own count applies for ${BREAKER_OPEN_MS} ms`,
    error === undefined ? undefined : { error },
  );
}

/** Key → its requests in this isolate during the fixed window starting at `windowStart` (ms). */
const localCounts = new Map<string, { windowStart: number; count: number }>();
const LOCAL_COUNTS_MAX = 10_000;

/** Count one request of `key` in this isolate; returns ms until its window ends if it is over `limit`. */
function localOverLimit(key: string, limit: number, windowMs: number, now = Date.now()): number | null {
  const windowStart = now - (now % windowMs);
  let entry = localCounts.get(key);
  if (!entry || entry.windowStart !== windowStart) {
    if (!entry && localCounts.size >= LOCAL_COUNTS_MAX) {
      for (const [k, v] of localCounts) if (v.windowStart !== windowStart) localCounts.delete(k);
      if (localCounts.size >= LOCAL_COUNTS_MAX) localCounts.clear();
    }
    entry = { windowStart, count: 0 };
    localCounts.set(key, entry);
  }
  entry.count++;
  return entry.count > limit ? windowStart + windowMs - now : null;
}

/** Identifier → blocked-until (ms), shared by the isolate's requests; the library reads and fills it. */
const blockedUntil = new Map<string, number>();
const prefix = redisKeys().rateLimitPrefix();

/**
 * Count one request (or chat frame) of the key `keyHash` (the SHA-256 the key table stores);
 * returns the 429 `rate_limited` to answer past the limit, else null (also when the limit is off).
 */
export async function checkKeyRate(
  redis: () => Redis,
  limits: GatewayConfig["limits"],
  keyHash: string,
): Promise<ApiError | null> {
  const { rateLimitRequests: requests, rateLimitWindowS: windowS } = limits;
  if (requests <= 0) return null;
  const refuse = (waitMs: number) =>
    new ApiError("rate_limited", `more than ${requests} requests in ${windowS} s with this API key`, {
      retryAfterS: waitMs / 1000,
    });
  const localWait = localOverLimit(keyHash, requests, windowS * 1000);
  if (localWait !== null) return refuse(localWait);
  if (Date.now() < breakerOpenUntil) return null;
  // The isolate's Redis client (deps.ts): no auto-pipelining, so this check's fetch is this request's.
  const limiter = new Ratelimit({
    redis: redis(),
    limiter: Ratelimit.slidingWindow(requests, `${windowS} s`),
    prefix,
    analytics: false,
    timeout: CHECK_TIMEOUT_MS,
    ephemeralCache: blockedUntil,
  });
  let verdict: Awaited<ReturnType<Ratelimit["limit"]>>;
  try {
    verdict = await timed("ratelimit", () => limiter.limit(keyHash));
  } catch (err) {
    openBreaker("failed", err);
    return null;
  }
  if (verdict.reason === "timeout") openBreaker(`took over ${CHECK_TIMEOUT_MS} ms`);
  return verdict.success ? null : refuse(verdict.reset - Date.now());
}

export function rateLimit() {
  return createMiddleware<GatewayEnv>(async (c, next) => {
    const refused = await checkKeyRate(c.get("deps").redis, c.get("config").limits, c.get("apiKeyHash"));
    if (refused) throw refused;
    await next();
  });
}
