/**
 * The gateway's `Server-Timing` header (workers/middleware/server-timing): per part, the wall
 * time the request waited on it (`dur`, ms) and how many calls made it (`desc`); `app` is the
 * handler's own time from its first middleware to the answer's head.
 */
export interface GatewayTiming {
  appMs: number | null;
  pgMs: number;
  pgCalls: number;
  rateLimitMs: number;
  doMs: number;
}

export function parseServerTiming(header: string | null): GatewayTiming | null {
  if (!header) return null;
  const parts = new Map<string, { dur: number; calls: number }>();
  for (const item of header.split(",")) {
    const [name, ...params] = item.trim().split(";");
    if (!name) continue;
    const dur = Number(params.find((p) => p.startsWith("dur="))?.slice(4));
    const desc = params
      .find((p) => p.startsWith("desc="))
      ?.slice(5)
      .replaceAll('"', "");
    parts.set(name, { dur: Number.isFinite(dur) ? dur : 0, calls: desc ? Number(desc) || 0 : 0 });
  }
  if (!parts.has("app")) return null;
  return {
    appMs: parts.get("app")?.dur ?? null,
    pgMs: parts.get("pg")?.dur ?? 0,
    pgCalls: parts.get("pg")?.calls ?? 0,
    rateLimitMs: parts.get("ratelimit")?.dur ?? 0,
    doMs: parts.get("do")?.dur ?? 0,
  };
}
