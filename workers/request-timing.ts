/**
 * What a /v1 request waited on, carried through its awaits (AsyncLocalStorage, which workerd
 * provides under nodejs_compat): `timed` adds a call's wall time to the request's part, and the
 * Server-Timing middleware (workers/middleware/server-timing) writes the header. Here, apart from
 * the middleware, so deps.ts can time its calls without importing the gateway's types.
 */
import { AsyncLocalStorage } from "node:async_hooks";

/** What a request waited on. */
export type TimingPart = "pg" | "ratelimit" | "do";

export class RequestTiming {
  readonly start = Date.now();
  private readonly parts = new Map<TimingPart, { ms: number; calls: number }>();

  add(part: TimingPart, ms: number): void {
    const p = this.parts.get(part) ?? { ms: 0, calls: 0 };
    p.ms += ms;
    p.calls++;
    this.parts.set(part, p);
  }

  /** The header's value: each part in the order it first appeared, then `app`. */
  header(): string {
    const out = [...this.parts].map(([name, p]) => `${name};dur=${p.ms};desc="${p.calls}"`);
    out.push(`app;dur=${Date.now() - this.start}`);
    return out.join(", ");
  }
}

export const currentTiming = new AsyncLocalStorage<RequestTiming>();

/** Runs `work`, adding its wall time to the request's `part` (a no-op outside a timed request). */
export async function timed<T>(part: TimingPart, work: () => Promise<T>): Promise<T> {
  const timing = currentTiming.getStore();
  if (!timing) return work();
  const started = Date.now();
  try {
    return await work();
  } finally {
    timing.add(part, Date.now() - started);
  }
}

/** A fetch whose calls count as `part` of the request that made them. */
export function timedFetch(part: TimingPart): typeof fetch {
  return ((input: RequestInfo | URL, init?: RequestInit) => timed(part, () => fetch(input, init))) as typeof fetch;
}
