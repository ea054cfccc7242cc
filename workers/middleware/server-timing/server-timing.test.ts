/**
 * serverTiming alone on a bare app: each part a handler waited on appears once with its summed
 * wait and its number of calls, `app` always, and nothing is timed outside a request.
 */
import { Hono } from "hono";
import { describe, expect, it } from "vitest";
import { timed } from "../../request-timing";
import type { GatewayEnv } from "../../types";
import { serverTiming } from "./server-timing";

const wait = (ms: number) => new Promise((r) => setTimeout(r, ms));

function parse(header: string | null): Record<string, { dur: number; desc?: string }> {
  const out: Record<string, { dur: number; desc?: string }> = {};
  for (const item of (header ?? "").split(",")) {
    const [name, ...params] = item.trim().split(";");
    const dur = params.find((p) => p.startsWith("dur="));
    const desc = params.find((p) => p.startsWith("desc="));
    out[name as string] = { dur: Number(dur?.slice(4)), ...(desc ? { desc: desc.slice(6, -1) } : {}) };
  }
  return out;
}

function bareApp() {
  const app = new Hono<GatewayEnv>();
  app.use(serverTiming());
  app.get("/two-queries", async (c) => {
    await timed("pg", () => wait(20));
    await timed("pg", () => wait(20));
    await timed("do", () => wait(10));
    return c.json({ ok: true });
  });
  app.get("/passthrough", async () => {
    // A fetched response's headers are immutable; a Response.redirect's are too.
    return Response.redirect("https://example.test/elsewhere", 302);
  });
  app.get("/fails", async () => {
    await timed("pg", () => Promise.reject(new Error("down")));
    return new Response("unreachable");
  });
  app.onError((err, c) => c.json({ error: err.message }, 503));
  return app;
}

describe("serverTiming", () => {
  it("sums each part's waits with its call count, and gives the handler's time as app", async () => {
    const res = await bareApp().request("/two-queries");
    expect(res.status).toBe(200);
    const t = parse(res.headers.get("server-timing"));
    expect(t.pg?.desc).toBe("2");
    expect(t.pg?.dur).toBeGreaterThanOrEqual(40);
    expect(t.do?.desc).toBe("1");
    expect(t.do?.dur).toBeGreaterThanOrEqual(10);
    // Whole milliseconds, each part rounded on its own: the sum may pass app by a rounding or two.
    expect(t.app?.dur).toBeGreaterThanOrEqual((t.pg?.dur ?? 0) + (t.do?.dur ?? 0) - 2);
    expect(t.ratelimit).toBeUndefined();
  });

  it("a failed call still counts, and the error's answer carries the header", async () => {
    const res = await bareApp().request("/fails");
    expect(res.status).toBe(503);
    expect(parse(res.headers.get("server-timing")).pg?.desc).toBe("1");
  });

  it("a response with immutable headers is copied, not refused", async () => {
    const res = await bareApp().request("/passthrough");
    expect(res.status).toBe(302);
    expect(res.headers.get("location")).toBe("https://example.test/elsewhere");
    expect(parse(res.headers.get("server-timing")).app).toBeDefined();
  });

  it("outside a request, timed just runs the work", async () => {
    await expect(timed("pg", async () => 7)).resolves.toBe(7);
  });
});
