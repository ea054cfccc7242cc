/**
 * A process's event-loop delay over a step: node:perf_hooks' monitorEventLoopDelay, whose timer
 * fires every `RESOLUTION_MS` and records the whole interval between firings. Reported here is
 * the delay past the timer's own interval (an idle loop reads ~0, not ~10 ms), p50 / p99 / max.
 */
import { monitorEventLoopDelay } from "node:perf_hooks";

export const LOOP_RESOLUTION_MS = 10;

export interface LoopFigures {
  p50Ms: number | null;
  p99Ms: number | null;
  maxMs: number | null;
}

export function startLoopDelay(): { stop: () => LoopFigures } {
  const h = monitorEventLoopDelay({ resolution: LOOP_RESOLUTION_MS });
  h.enable();
  return {
    stop: () => {
      h.disable();
      if (!h.count) return { p50Ms: null, p99Ms: null, maxMs: null };
      const ms = (ns: number) => Math.round(Math.max(0, ns / 1e6 - LOOP_RESOLUTION_MS) * 100) / 100;
      return { p50Ms: ms(h.percentile(50)), p99Ms: ms(h.percentile(99)), maxMs: ms(h.max) };
    },
  };
}
