/**
 * Just enough Prometheus text-format parsing for the load generator: gauges by name and cumulative
 * histogram buckets, plus the arithmetic on bucket deltas (a p99 estimate and the highest
 * bucket that saw a sample during a window).
 */

export interface PromSample {
  name: string;
  labels: Record<string, string>;
  value: number;
}

export function parsePrometheus(text: string): PromSample[] {
  const out: PromSample[] = [];
  for (const raw of text.split("\n")) {
    const line = raw.trim();
    if (line === "" || line.startsWith("#")) continue;
    const m = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})?\s+(\S+)/.exec(line);
    if (!m) continue;
    const labels: Record<string, string> = {};
    if (m[3]) {
      for (const lm of m[3].matchAll(/([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g)) {
        labels[lm[1] as string] = (lm[2] as string).replace(/\\(.)/g, "$1");
      }
    }
    const value = m[4] === "+Inf" ? Number.POSITIVE_INFINITY : Number(m[4]);
    if (!Number.isNaN(value)) out.push({ name: m[1] as string, labels, value });
  }
  return out;
}

/** The first sample of a metric (summed over series when `sum` is set). */
export function gauge(samples: PromSample[], name: string, sum = false): number | null {
  const hits = samples.filter((s) => s.name === name);
  if (hits.length === 0) return null;
  return sum ? hits.reduce((a, s) => a + s.value, 0) : (hits[0] as PromSample).value;
}

/** Cumulative bucket counts of a histogram, sorted by upper bound (`le`), +Inf last. */
export interface Buckets {
  le: number[];
  counts: number[];
}

export function histogramBuckets(samples: PromSample[], name: string): Buckets | null {
  const rows = samples
    .filter((s) => s.name === `${name}_bucket` && s.labels.le !== undefined)
    .map((s) => ({ le: s.labels.le === "+Inf" ? Number.POSITIVE_INFINITY : Number(s.labels.le), count: s.value }));
  if (rows.length === 0) return null;
  // Several series (labels) of the same histogram: add them per bound.
  const byLe = new Map<number, number>();
  for (const r of rows) byLe.set(r.le, (byLe.get(r.le) ?? 0) + r.count);
  const le = [...byLe.keys()].sort((a, b) => a - b);
  return { le, counts: le.map((b) => byLe.get(b) as number) };
}

/** later − earlier, per bound (a counter reset, e.g. a restarted host, yields `later`). */
export function bucketDelta(earlier: Buckets | null, later: Buckets | null): Buckets | null {
  if (!later) return null;
  if (!earlier || earlier.le.length !== later.le.length) return later;
  const counts = later.counts.map((c, i) => c - (earlier.counts[i] as number));
  if (counts.some((c) => c < 0)) return later;
  return { le: later.le, counts };
}

export interface BucketSummary {
  samples: number;
  /** Upper bound of the bucket holding the q-quantile (an upper estimate), seconds. */
  p99UpperS: number | null;
  /** Upper bound of the highest bucket that received a sample in the window, seconds. */
  maxBucketS: number | null;
  /** Lower bound of that bucket (the max was at least this), seconds. */
  maxAtLeastS: number | null;
}

export function summarizeBuckets(delta: Buckets | null, q = 0.99): BucketSummary {
  if (!delta) return { samples: 0, p99UpperS: null, maxBucketS: null, maxAtLeastS: null };
  const total = delta.counts[delta.counts.length - 1] ?? 0;
  if (total <= 0) return { samples: 0, p99UpperS: null, maxBucketS: null, maxAtLeastS: null };
  let p99: number | null = null;
  for (let i = 0; i < delta.le.length; i++) {
    if ((delta.counts[i] as number) >= q * total) {
      p99 = delta.le[i] as number;
      break;
    }
  }
  let maxIdx = 0;
  for (let i = 0; i < delta.le.length; i++) {
    const prev = i === 0 ? 0 : (delta.counts[i - 1] as number);
    if ((delta.counts[i] as number) - prev > 0) maxIdx = i;
  }
  return {
    samples: total,
    p99UpperS: p99,
    maxBucketS: delta.le[maxIdx] as number,
    maxAtLeastS: maxIdx === 0 ? 0 : (delta.le[maxIdx - 1] as number),
  };
}
