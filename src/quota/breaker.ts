/**
 * A small circuit breaker in front of Redis. Quota fails closed when Redis is unreachable; the
 * breaker keeps a dead Redis from being hammered by every waiter of every run: after
 * `failureThreshold` consecutive failures it opens and refuses locally for `cooldownMs`, then
 * lets exactly one probe through (half-open); the probe's outcome closes or re-opens it.
 * Its snapshot is what `/readyz` and metrics report.
 */
import { jitter } from "../domain/backoff";
import { QuotaUnavailableError } from "./quota-errors";

export type BreakerState = "closed" | "open" | "half_open";

export interface BreakerSnapshot {
  state: BreakerState;
  consecutiveFailures: number;
  /** Milliseconds until an open breaker lets a probe through (0 unless open). */
  retryInMs: number;
  /** Times the breaker has opened since start (a counter for metrics). */
  opened: number;
  lastError: string | null;
}

export interface BreakerOptions {
  /** Consecutive failures that open the breaker (default 3). */
  failureThreshold?: number;
  /** How long an open breaker refuses locally before a probe (default 1000 ms, ±20 % jitter). */
  cooldownMs?: number;
  /** Monotonic clock in ms (default performance.now). */
  now?: () => number;
  onChange?: (snapshot: BreakerSnapshot) => void;
}

export class CircuitBreaker {
  private state: BreakerState = "closed";
  private failures = 0;
  private openUntil = 0;
  private opened = 0;
  private probing = false;
  private lastError: string | null = null;
  private readonly threshold: number;
  private readonly cooldownMs: number;
  private readonly now: () => number;
  private readonly onChange?: (snapshot: BreakerSnapshot) => void;

  constructor(opts: BreakerOptions = {}) {
    this.threshold = opts.failureThreshold ?? 3;
    this.cooldownMs = opts.cooldownMs ?? 1000;
    this.now = opts.now ?? (() => performance.now());
    this.onChange = opts.onChange;
  }

  snapshot(): BreakerSnapshot {
    const retryInMs = this.state === "open" ? Math.max(0, Math.ceil(this.openUntil - this.now())) : 0;
    return {
      state: this.state,
      consecutiveFailures: this.failures,
      retryInMs,
      opened: this.opened,
      lastError: this.lastError,
    };
  }

  /** Runs `call` unless the breaker refuses; any thrown error counts as a Redis failure. */
  async run<T>(call: () => Promise<T>): Promise<T> {
    if (this.state === "open") {
      if (this.now() < this.openUntil || this.probing) throw this.refusal();
      this.transition("half_open");
    }
    if (this.state === "half_open") {
      if (this.probing) throw this.refusal();
      this.probing = true;
    }
    try {
      const result = await call();
      this.succeeded();
      return result;
    } catch (err) {
      this.failed(err);
      throw new QuotaUnavailableError(`redis call failed: ${messageOf(err)}`, { cause: err });
    } finally {
      this.probing = false;
    }
  }

  private refusal(): QuotaUnavailableError {
    return new QuotaUnavailableError(`quota breaker ${this.state}: not calling redis (last error: ${this.lastError})`, {
      breakerOpen: true,
    });
  }

  private succeeded(): void {
    this.failures = 0;
    if (this.state !== "closed") this.transition("closed");
  }

  private failed(err: unknown): void {
    this.failures += 1;
    this.lastError = messageOf(err);
    if (this.state === "half_open" || this.failures >= this.threshold) {
      this.openUntil = this.now() + jitter(this.cooldownMs);
      this.opened += 1;
      this.transition("open");
    }
  }

  private transition(to: BreakerState): void {
    this.state = to;
    this.onChange?.(this.snapshot());
  }
}

function messageOf(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}
