/**
 * The one timing serializer. Every API view of a run (job, list, conversation history) derives
 * its latencies here, so two views of one run can never disagree. Never negative (clock skew
 * between writers is clamped to 0), null when either point is missing.
 */
import type { LatencyView } from "../contracts/job";

export interface TimingFacts {
  created_at: Date | string | null;
  started_at: Date | string | null;
  prepared_at: Date | string | null;
  first_output_at: Date | string | null;
  finished_at: Date | string | null;
}

function ms(value: Date | string | null): number | null {
  if (value === null) return null;
  const t = value instanceof Date ? value.getTime() : Date.parse(value);
  return Number.isFinite(t) ? t : null;
}

function span(from: Date | string | null, to: Date | string | null): number | null {
  const a = ms(from);
  const b = ms(to);
  if (a === null || b === null) return null;
  return Math.max(0, Math.round(b - a));
}

export function deriveLatency(f: TimingFacts): LatencyView {
  return {
    dispatch_latency_ms: span(f.created_at, f.started_at),
    preparation_latency_ms: span(f.started_at, f.prepared_at),
    model_first_output_latency_ms: span(f.prepared_at, f.first_output_at),
    first_output_latency_ms: span(f.created_at, f.first_output_at),
    total_latency_ms: span(f.created_at, f.finished_at),
  };
}

export function isoOrNull(value: Date | string | null): string | null {
  const t = ms(value);
  return t === null ? null : new Date(t).toISOString();
}
