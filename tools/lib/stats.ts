/** Percentiles over plain samples (nearest-rank, so a reported percentile is an observed sample). */

export interface Dist {
  n: number;
  p50: number | null;
  p95: number | null;
  max: number | null;
}

export function percentile(sorted: number[], q: number): number | null {
  if (sorted.length === 0) return null;
  const rank = Math.max(1, Math.ceil(q * sorted.length));
  return sorted[Math.min(sorted.length, rank) - 1] as number;
}

/** Nearest-rank percentile `p` (0–100) of unsorted samples; NaN when there are none. */
export function pct(values: number[], p: number): number {
  return (
    percentile(
      [...values].sort((a, b) => a - b),
      p / 100,
    ) ?? Number.NaN
  );
}

export function dist(values: Array<number | null | undefined>): Dist {
  const v = values.filter((x): x is number => typeof x === "number" && Number.isFinite(x)).sort((a, b) => a - b);
  return {
    n: v.length,
    p50: percentile(v, 0.5),
    p95: percentile(v, 0.95),
    max: v.length ? (v.at(-1) as number) : null,
  };
}

export function round(x: number | null, digits = 0): number | null {
  if (x === null) return null;
  const f = 10 ** digits;
  return Math.round(x * f) / f;
}
