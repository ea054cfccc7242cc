/**
 * `Server-Timing` on every /v1 answer: how long the request waited on each dependency, so a
 * client (the load tool, a browser's network panel) can split a slow answer into the gateway's
 * own waits and the time before the Worker ran at all. Parts: `pg` (Neon SQL-over-HTTP fetches),
 * `ratelimit` (the per-key Redis check), `do` (Durable Object calls: the job's event log, the
 * tenant's stream leases), each with the number of calls as `desc`, and `app`, the handler's wall
 * time from the first middleware to the answer's head. Parts overlap when calls run at once, so
 * they need not add up to `app`.
 *
 * Wall time only: in workerd the clock advances on I/O, not during JavaScript, so a part is a wait
 * on its dependency, not CPU. The header names no query, key or tenant; it is what a browser's
 * network panel shows of any site that sends it.
 */
import { createMiddleware } from "hono/factory";
import { currentTiming, RequestTiming } from "../../request-timing";
import type { GatewayEnv } from "../../types";

export function serverTiming() {
  return createMiddleware<GatewayEnv>(async (c, next) => {
    const timing = new RequestTiming();
    await currentTiming.run(timing, next);
    // A WebSocket upgrade's 101 cannot be rebuilt, and the socket's life is not the request's.
    if (c.res.status === 101) return;
    const value = timing.header();
    try {
      c.res.headers.set("server-timing", value);
    } catch {
      // A response passed through from a fetch has immutable headers: copy it (the body streams on).
      c.res = new Response(c.res.body, c.res);
      c.res.headers.set("server-timing", value);
    }
  });
}
