/**
 * Request rate per API key on every /v1 route (after auth, so the key is known to be real):
 * @upstash/ratelimit's sliding window over the gateway's Upstash client, one EVALSHA per request.
 * Past the limit: 429 `rate_limited` with `Retry-After` (whole seconds until the window lets the
 * next request through).
 *
 * Fail open. The limit protects capacity; it holds no truth (the job row in Postgres is the
 * truth, Redis only wakes claimers), so Redis being slow or down must not turn every request
 * into an error. A check that takes longer than CHECK_TIMEOUT_MS lets the request through (the
 * library's own `timeout`), and a check that fails is logged and lets it through too.
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
export const CHECK_TIMEOUT_MS = 300;

/** Identifier → blocked-until (ms), shared by the isolate's requests; the library reads and fills it. */
const blockedUntil = new Map<string, number>();
const prefix = redisKeys().rateLimitPrefix();

export function rateLimit() {
  return createMiddleware<GatewayEnv>(async (c, next) => {
    const { rateLimitRequests: requests, rateLimitWindowS: windowS } = c.get("config").limits;
    if (requests <= 0) return next();
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
      console.warn(JSON.stringify({ msg: "rate limit check failed; request let through", error: String(err) }));
      return next();
    }
    if (verdict.reason === "timeout") {
      console.warn(JSON.stringify({ msg: "rate limit check timed out; request let through", ms: CHECK_TIMEOUT_MS }));
    }
    if (!verdict.success) {
      throw new ApiError("rate_limited", `more than ${requests} requests in ${windowS} s with this API key`, {
        retryAfterS: (verdict.reset - Date.now()) / 1000,
      });
    }
    await next();
  });
}
