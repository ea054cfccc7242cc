/** Exponential backoff with full jitter (AWS architecture blog's "full jitter" variant). */
export interface BackoffOptions {
  baseMs: number;
  maxMs: number;
}

export function backoffDelay(attempt: number, { baseMs, maxMs }: BackoffOptions, random = Math.random): number {
  const ceiling = Math.min(maxMs, baseMs * 2 ** Math.max(0, attempt));
  return Math.floor(random() * ceiling);
}

/** A value in [ms*(1-spread), ms*(1+spread)], so periodic work on many hosts does not align. */
export function jitter(ms: number, spread = 0.2, random = Math.random): number {
  return Math.max(0, Math.round(ms * (1 - spread + 2 * spread * random())));
}
