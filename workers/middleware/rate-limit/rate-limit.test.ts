/**
 * rateLimit alone on a bare app, over an in-memory stand-in for Redis that counts as the sliding
 * window's script does: what passes, what is refused with 429 `rate_limited` and Retry-After,
 * that the isolate's own count refuses without asking Redis, and that a failing Redis lets
 * requests through (fail open) and opens the breaker.
 */
import { Hono } from "hono";
import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import type { Redis } from "../../../src/quota/redis";
import type { Deps } from "../../deps";
import type { GatewayConfig } from "../../gateway-config";
import type { GatewayEnv } from "../../types";

type RateLimitModule = typeof import("./rate-limit");
type ErrorHandlerModule = typeof import("../error-handler/error-handler");

/** Counts per window key as @upstash/ratelimit's single-region sliding-window script does (previous window ignored). */
class FakeRedis {
  readonly counts = new Map<string, number>();
  calls = 0;
  failWith: Error | null = null;
  async evalsha(_sha: string, keys: string[], args: unknown[]): Promise<[number, number]> {
    this.calls++;
    if (this.failWith) throw this.failWith;
    const [current] = keys as [string];
    const tokens = Number(args[0]);
    const used = this.counts.get(current) ?? 0;
    if (used >= tokens) return [-1, tokens];
    this.counts.set(current, used + 1);
    return [tokens - (used + 1), tokens];
  }
  /** Pretend other isolates already spent `n` of the window for every key seen from now on. */
  preload(n: number) {
    const original = this.evalsha.bind(this);
    this.evalsha = async (sha, keys, args) => {
      const [current] = keys as [string];
      if (!this.counts.has(current)) this.counts.set(current, n);
      return original(sha, keys, args);
    };
  }
}

let mod: RateLimitModule;
let errors: ErrorHandlerModule;
let redis: FakeRedis;

beforeEach(async () => {
  // The breaker and the isolate's counts are module state: each test starts from a fresh isolate.
  vi.resetModules();
  mod = await import("./rate-limit");
  // Imported after the reset too, so its ApiError is the class the fresh middleware throws.
  errors = await import("../error-handler/error-handler");
  redis = new FakeRedis();
});
afterEach(() => vi.restoreAllMocks());

function bareApp(rateLimitRequests: number, rateLimitWindowS = 60) {
  const app = new Hono<GatewayEnv>();
  app.onError(errors.handleError);
  // What withConfig and authenticate put on the context before the limit runs.
  app.use(async (c, next) => {
    c.set("config", { limits: { rateLimitRequests, rateLimitWindowS } } as GatewayConfig);
    c.set("deps", { redis: () => redis as unknown as Redis } as Deps);
    c.set("apiKeyHash", c.req.header("x-key") ?? "key-a");
    await next();
  });
  app.use(mod.rateLimit());
  app.get("/v1/thing", (c) => c.json({ ok: true }));
  return app;
}

const get = (app: Hono<GatewayEnv>, key = "key-a") => app.request("/v1/thing", { headers: { "x-key": key } });

describe("rateLimit", () => {
  it("lets requests through up to the limit, then answers 429 `rate_limited` with Retry-After", async () => {
    const app = bareApp(3, 60);
    for (let i = 0; i < 3; i++) expect((await get(app)).status).toBe(200);
    const refused = await get(app);
    expect(refused.status).toBe(429);
    expect(await refused.json()).toEqual({
      error: { code: "rate_limited", message: "more than 3 requests in 60 s with this API key" },
    });
    const retryAfter = Number(refused.headers.get("retry-after"));
    expect(retryAfter).toBeGreaterThanOrEqual(1);
    expect(retryAfter).toBeLessThanOrEqual(60);
  });

  it("counts each key on its own", async () => {
    const app = bareApp(1);
    expect((await get(app, "key-a")).status).toBe(200);
    expect((await get(app, "key-a")).status).toBe(429);
    expect((await get(app, "key-b")).status).toBe(200);
  });

  it("refuses on Redis's count (other isolates' requests) even when this isolate has seen few", async () => {
    redis.preload(5);
    const app = bareApp(5);
    expect((await get(app)).status).toBe(429);
    expect(redis.calls).toBe(1);
    // A blocked key is remembered until its window resets: no Redis round trip per refusal.
    expect((await get(app)).status).toBe(429);
    expect(redis.calls).toBe(1);
  });

  it("a limit of 0 turns the check off: no Redis call, no refusal", async () => {
    const app = bareApp(0);
    for (let i = 0; i < 5; i++) expect((await get(app)).status).toBe(200);
    expect(redis.calls).toBe(0);
  });

  it("fails open when Redis fails, opens the breaker, and still refuses past this isolate's own count", async () => {
    const warn = vi.spyOn(console, "warn").mockImplementation(() => {});
    redis.failWith = new Error("connection refused");
    const app = bareApp(2);
    expect((await get(app)).status).toBe(200);
    expect(redis.calls).toBe(1);
    expect(warn).toHaveBeenCalledTimes(1);
    expect(String(warn.mock.calls[0]?.[0])).toContain(
      `only this isolate's own count applies for ${mod.BREAKER_OPEN_MS} ms`,
    );
    // Breaker open: no Redis call, and the local count is what binds.
    expect((await get(app)).status).toBe(200);
    expect((await get(app)).status).toBe(429);
    expect(redis.calls).toBe(1);
    expect(warn).toHaveBeenCalledTimes(1);
  });
});

describe("checkKeyRate", () => {
  it("is the same check for a chat frame: null under the limit, the 429 past it", async () => {
    const limits = { rateLimitRequests: 1, rateLimitWindowS: 10 } as GatewayConfig["limits"];
    const redisFn = () => redis as unknown as Redis;
    expect(await mod.checkKeyRate(redisFn, limits, "frames")).toBeNull();
    const refused = await mod.checkKeyRate(redisFn, limits, "frames");
    expect(refused?.code).toBe("rate_limited");
    expect(refused?.status).toBe(429);
  });
});
