/**
 * withConfig alone on a bare app: a valid environment puts the parsed configuration and the lazy
 * dependency handles on the context; a broken one is the operator's bug, a logged 500.
 */
import { Hono } from "hono";
import { afterEach, describe, expect, it, vi } from "vitest";
import type { Env } from "../../env";
import type { GatewayEnv } from "../../types";
import { handleError } from "../error-handler/error-handler";
import { withConfig } from "./with-config";

const VALID = {
  DATABASE_URL: "postgres://ear:ear@127.0.0.1:1/ear",
  UPSTASH_REDIS_REST_URL: "http://127.0.0.1:1",
  UPSTASH_REDIS_REST_TOKEN: "test-token",
  INTERNAL_SIGNING_SECRET: "test-signing-secret-0123456789",
  CORS_ALLOWED_ORIGINS: "https://console.test",
  RATE_LIMIT_REQUESTS: "7",
};

function bareApp() {
  const app = new Hono<GatewayEnv>();
  // The error handler turns the middleware's ApiError into its answer, as the gateway's app does.
  app.onError(handleError);
  app.use(withConfig());
  app.get("/probe", (c) => {
    const config = c.get("config");
    const deps = c.get("deps");
    return c.json({
      origins: config.corsAllowedOrigins,
      rateLimitRequests: config.limits.rateLimitRequests,
      deps: [typeof deps.db, typeof deps.redis],
    });
  });
  return app;
}

afterEach(() => vi.restoreAllMocks());

describe("withConfig", () => {
  it("parses the bindings and puts the configuration and the dependency handles on the context", async () => {
    const res = await bareApp().request("/probe", {}, VALID as unknown as Env);
    expect(res.status).toBe(200);
    expect(await res.json()).toEqual({
      origins: ["https://console.test"],
      rateLimitRequests: 7,
      deps: ["function", "function"],
    });
  });

  it("a broken configuration answers 500 `internal` without its details, and logs why", async () => {
    const error = vi.spyOn(console, "error").mockImplementation(() => {});
    const broken = { ...VALID, INTERNAL_SIGNING_SECRET: "short" };
    const res = await bareApp().request("/probe", {}, broken as unknown as Env);
    expect(res.status).toBe(500);
    const text = await res.text();
    expect(JSON.parse(text)).toEqual({ error: { code: "internal", message: "the gateway is misconfigured" } });
    expect(text).not.toContain("INTERNAL_SIGNING_SECRET");
    expect(error).toHaveBeenCalledTimes(1);
    expect(String(error.mock.calls[0]?.[0])).toContain("INTERNAL_SIGNING_SECRET must be at least 16 characters");
  });

  it("the route never runs on a broken configuration", async () => {
    vi.spyOn(console, "error").mockImplementation(() => {});
    const app = new Hono<GatewayEnv>();
    app.onError(handleError);
    app.use(withConfig());
    let reached = false;
    app.get("/probe", (c) => {
      reached = true;
      return c.text("ok");
    });
    const res = await app.request("/probe", {}, { ...VALID, DATABASE_URL: "" } as unknown as Env);
    expect(res.status).toBe(500);
    expect(reached).toBe(false);
  });
});
