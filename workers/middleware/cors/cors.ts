/**
 * CORS for the configured origins (CORS_ALLOWED_ORIGINS), with hono/cors. It runs before auth
 * and the rate limit, so a preflight (OPTIONS, which never carries credentials) is answered 204
 * without either, and every answer to an allowed origin, errors included, carries
 * Access-Control-Allow-Origin so the page can read it (a 401 or a 429 it could not read would
 * look like a network failure). An origin not listed, or a request without Origin, gets no CORS
 * header at all (hono/cors alone still sent Expose-Headers, and Allow-Methods/-Headers/Max-Age on
 * a preflight, to any origin): its browser refuses to hand the answer to the page; its preflight is
 * still answered 204 before auth, and every answer varies by Origin so a cache never serves one
 * origin's answer to another. No cookies are involved (credentials are Bearer), so
 * Allow-Credentials is never sent.
 *
 * WebSocket upgrades are left alone: browsers do not apply CORS to them, and a 101 must stay the
 * object's own response.
 */
import { cors } from "hono/cors";
import { createMiddleware } from "hono/factory";
import { originMatches, splitAnyPort } from "../../../src/domain/mcp";
import type { GatewayEnv } from "../../types";

/** How long a browser may reuse a preflight's answer (s). */
const PREFLIGHT_MAX_AGE_S = 600;

const allowed = cors({
  origin: (origin) => origin,
  allowMethods: ["GET", "POST", "OPTIONS"],
  // last-event-id: a fetch-based SSE client resumes with the header, which is not CORS-safelisted.
  allowHeaders: ["authorization", "content-type", "last-event-id"],
  exposeHeaders: ["retry-after"],
  maxAge: PREFLIGHT_MAX_AGE_S,
  credentials: false,
});

/** `origin` is one of the entries, or on a loopback host an entry names with any port (`http://localhost:*`). */
export function corsOriginAllowed(origin: string, entries: readonly string[]): boolean {
  if (entries.includes(origin)) return true;
  let url: URL;
  try {
    url = new URL(origin);
  } catch {
    return false;
  }
  if (url.origin !== origin) return false;
  return entries.some((e) => {
    const wild = splitAnyPort(e);
    return (
      wild !== null &&
      typeof wild !== "string" &&
      originMatches(url, { origin: new URL(wild.url).origin, anyPort: true })
    );
  });
}

export function corsForAllowedOrigins() {
  return createMiddleware<GatewayEnv>(async (c, next) => {
    if (c.req.header("upgrade")?.toLowerCase() === "websocket") return next();
    const origin = c.req.header("origin");
    if (origin !== undefined && corsOriginAllowed(origin, c.get("config").corsAllowedOrigins)) return allowed(c, next);
    if (c.req.method === "OPTIONS" && c.req.header("access-control-request-method") !== undefined) {
      return new Response(null, { status: 204, headers: { vary: "Origin" } });
    }
    await next();
    c.header("Vary", "Origin", { append: true });
  });
}
