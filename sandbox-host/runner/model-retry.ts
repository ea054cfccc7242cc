/**
 * Which failed model calls are tried again, and after how long. Only a call that failed before
 * it produced any output is retried: a stream cut after output had started would repeat what
 * the tenant already saw (the run fails instead). The wait is the provider's Retry-After when it
 * sends one, else exponential backoff with full jitter (AWS's "Exponential Backoff and Jitter":
 * a uniformly random wait below the doubling ceiling spreads a crowd of clients that failed
 * together, where equal waits would bring them back together).
 */
import type { ModelError } from "../model/types";

export interface RetryPolicy {
  /** Retries per turn (0 = none). */
  maxRetries: number;
  /** The first wait's ceiling, doubled per retry. */
  baseMs: number;
  maxDelayMs: number;
  /** No retry whose wait would end later than this after the turn's first attempt began. */
  budgetMs: number;
}

/** 429, 5xx, an error event inside an open stream (no status), connection failures and timeouts. */
export function isRetryable(err: ModelError): boolean {
  if (err.code === "rate_limited" || err.code === "network_error") return true;
  if (err.code === "provider_error") return err.status === null || err.status >= 500;
  return false;
}

/**
 * The wait before retry number `retry` (1 = the first), or null when the policy says stop: out
 * of retries, or the wait would overrun the turn's budget (`elapsedMs` since its first attempt).
 * `random` draws the jitter (default Math.random).
 */
export function retryDelayMs(
  policy: RetryPolicy,
  attempt: { retry: number; err: ModelError; elapsedMs: number; random?: () => number },
): number | null {
  const { retry, err, elapsedMs, random = Math.random } = attempt;
  if (retry > policy.maxRetries || !isRetryable(err)) return null;
  const ceiling = Math.min(policy.maxDelayMs, policy.baseMs * 2 ** (retry - 1));
  const delay = err.retryAfterMs ?? Math.floor(random() * ceiling);
  return elapsedMs + delay > policy.budgetMs ? null : delay;
}
