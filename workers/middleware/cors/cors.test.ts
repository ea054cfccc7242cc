/**
 * corsForAllowedOrigins alone on a bare app: which origins get CORS headers, how a preflight is
 * answered without reaching the routes, and that every answer varies by Origin.
 */
import { Hono } from "hono";
import { describe, expect, it } from "vitest";
import type { GatewayConfig } from "../../gateway-config";
import type { GatewayEnv } from "../../types";
import { corsForAllowedOrigins, corsOriginAllowed } from "./cors";

const ALLOWED = "https://console.test";

function bareApp() {
  const app = new Hono<GatewayEnv>();
  // The middleware reads only the allowed origins from the parsed configuration.
  app.use(async (c, next) => {
    c.set("config", { corsAllowedOrigins: [ALLOWED] } as unknown as GatewayConfig);
    await next();
  });
  app.use(corsForAllowedOrigins());
  app.get("/v1/thing", (c) => c.json({ ok: true }));
  app.post("/v1/thing", (c) => c.json({ refused: true }, 401));
  return app;
}

const preflight = (origin: string) => ({
  method: "OPTIONS",
  headers: { origin, "access-control-request-method": "POST", "access-control-request-headers": "authorization" },
});

describe("corsForAllowedOrigins", () => {
  it("an allowed origin's answer carries Allow-Origin and the exposed Retry-After, and no Allow-Credentials", async () => {
    const res = await bareApp().request("/v1/thing", { headers: { origin: ALLOWED } });
    expect(res.status).toBe(200);
    expect(res.headers.get("access-control-allow-origin")).toBe(ALLOWED);
    expect(res.headers.get("access-control-expose-headers")).toBe("retry-after");
    expect(res.headers.get("access-control-allow-credentials")).toBeNull();
    expect(res.headers.get("vary")).toContain("Origin");
  });

  it("an error answer to an allowed origin is readable by the page too", async () => {
    const res = await bareApp().request("/v1/thing", { method: "POST", headers: { origin: ALLOWED } });
    expect(res.status).toBe(401);
    expect(res.headers.get("access-control-allow-origin")).toBe(ALLOWED);
  });

  it("an allowed origin's preflight is answered 204 with methods, headers and max-age, before any route", async () => {
    const res = await bareApp().request("/v1/thing", preflight(ALLOWED));
    expect(res.status).toBe(204);
    expect(res.headers.get("access-control-allow-origin")).toBe(ALLOWED);
    expect(res.headers.get("access-control-allow-methods")).toBe("GET,POST,OPTIONS");
    expect(res.headers.get("access-control-allow-headers")).toBe("authorization,content-type,last-event-id");
    expect(res.headers.get("access-control-max-age")).toBe("600");
  });

  it("an origin not listed gets no CORS header at all, on an answer or a preflight", async () => {
    const app = bareApp();
    const res = await app.request("/v1/thing", { headers: { origin: "https://evil.test" } });
    expect(res.status).toBe(200);
    const pre = await app.request("/v1/thing", preflight("https://evil.test"));
    expect(pre.status).toBe(204);
    for (const r of [res, pre]) {
      expect([...r.headers.keys()].filter((h) => h.startsWith("access-control-"))).toEqual([]);
      expect(r.headers.get("vary")).toBe("Origin");
    }
  });

  it("a request without Origin passes through untouched apart from Vary", async () => {
    const res = await bareApp().request("/v1/thing");
    expect(await res.json()).toEqual({ ok: true });
    expect(res.headers.get("access-control-allow-origin")).toBeNull();
    expect(res.headers.get("vary")).toBe("Origin");
  });

  it("a plain OPTIONS without a requested method is no preflight: it reaches the router", async () => {
    const res = await bareApp().request("/v1/thing", { method: "OPTIONS", headers: { origin: "https://evil.test" } });
    expect(res.status).toBe(404);
  });

  it("a WebSocket upgrade is left alone, even from an allowed origin", async () => {
    const res = await bareApp().request("/v1/thing", { headers: { origin: ALLOWED, upgrade: "websocket" } });
    expect(res.status).toBe(200);
    expect(res.headers.get("access-control-allow-origin")).toBeNull();
    expect(res.headers.get("vary")).toBeNull();
  });

  it("a loopback entry with any port (http://localhost:*) admits that host on every port, and nothing else", () => {
    const entries = ["http://localhost:*", "http://127.0.0.1:*"];
    for (const o of ["http://localhost:5173", "http://localhost", "http://127.0.0.1:3000"]) {
      expect(corsOriginAllowed(o, entries), o).toBe(true);
    }
    for (const o of [
      "https://localhost:5173",
      "http://localhost.evil.test:5173",
      "http://[::1]:5173",
      "http://evil.test",
    ]) {
      expect(corsOriginAllowed(o, entries), o).toBe(false);
    }
    expect(corsOriginAllowed("http://localhost:5173", ["http://localhost:5174"])).toBe(false);
  });
});
