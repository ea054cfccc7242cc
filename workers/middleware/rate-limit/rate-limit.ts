/**
 * Request rate per API key on every /v1 route (after auth, so the key is known to be real):
 * @upstash/ratelimit's sliding window over the gateway's Upstash client, one EVALSHA per request.
 * Past the limit: 429 `rate_limited` with `Retry-After` (whole seconds until the window lets the
 * next request through).
 *
 * Fail open. The limit protects capacity; it holds no truth (the job row in Postgres is the
 * truth, Redis only wakes claimers), so Redis being down must not turn every request into an
 * error. A check that fails, or takes longer than CHECK_TIMEOUT_MS, lets the request through
 * and opens a per-isolate breaker: for BREAKER_OPEN_MS no check is made (one log line per
 * opening). A refused connection fails in milliseconds; a hung Redis delays the requests already
 * waiting on it by up to the timeout, and then none until the breaker closes. The timeout is generous on purpose: measured on this 2-core machine under a
 * 300-request burst, checks took ~2 s of queueing in a saturated gateway, and a short timeout
 * made the limiter let everything through exactly when it was needed (docs/limits.md).
 *
 * Blocked keys are remembered per isolate until their window resets (the library's ephemeral
 * cache), so a client hammering past its limit costs no Redis round trip per refused request.
 */
import { Ratelimit } from "@upstash/ratelimit";
import { createMiddleware } from "hono/factory";
import { ApiError } from "../../../src/contracts";
import { redisKeys } from "../../../src/quota/keys";
import type { GatewayEnv } from "../../types";

/** Longest wait for the check; a healthy Upstash answers in a few ms from a nearby region. */
export const CHECK_TIMEOUT_MS = 3_000;
/** After a failed or timed-out check, requests skip the check this long. */
export const BREAKER_OPEN_MS = 5_000;

/** Until when (ms) this isolate skips checks; 0 = closed. */
let breakerOpenUntil = 0;

function openBreaker(why: string, error?: unknown): void {
  breakerOpenUntil = Date.now() + BREAKER_OPEN_MS;
  console.warn(
    JSON.stringify({
      msg: `rate limit check ${why}; requests pass unchecked for ${BREAKER_OPEN_MS} ms`,
      ...(error === undefined ? {} : { error: String(error) }),
    }),
  );
}

/** Identifier → blocked-until (ms), shared by the isolate's requests; the library reads and fills it. */
const blockedUntil = new Map<string, number>();
const prefix = redisKeys().rateLimitPrefix();

export function rateLimit() {
  return createMiddleware<GatewayEnv>(async (c, next) => {
    const { rateLimitRequests: requests, rateLimitWindowS: windowS } = c.get("config").limits;
    if (requests <= 0 || Date.now() < breakerOpenUntil) return next();
    // Per request: an @upstash/redis client must not be shared across requests (deps.ts).
    const limiter = new Ratelimit({
      redis: c.get("deps").redis(),
      limiter: Ratelimit.slidingWindow(requests, `${windowS} s`),
      prefix,
      analytics: false,
      timeout: CHECK_TIMEOUT_MS,
      ephemeralCache: blockedUntil,
    });
    let verdict: Awaited<ReturnType<Ratelimit["limit"]>>;
    try {
      verdict = await limiter.limit(c.get("apiKeyHash"));
    } catch (err) {
      openBreaker("failed", err);
      return next();
    }
    if (verdict.reason === "timeout") openBreaker(`took over ${CHECK_TIMEOUT_MS} ms`);
    if (!verdict.success) {
      throw new ApiError("rate_limited", `more than ${requests} requests in ${windowS} s with this API key`, {
        retryAfterS: (verdict.reset - Date.now()) / 1000,
      });
    }
    await next();
  });
}
