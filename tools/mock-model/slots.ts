/**
 * In-flight accounting of the mock model: the concurrency cap and the counters tests read from
 * `GET /stats`. A slot is taken at admission and given back exactly once, when the response
 * really ends (finished, failed or the client went away), never by a timer.
 */

export type OverCapPolicy = "reject" | "admit";

export interface MockStats {
  /** Completion requests received (all outcomes). */
  requests: number;
  /** Completions served to their end. */
  completed: number;
  in_flight: number;
  max_concurrency_seen: number;
  /** Turned away with 429 because the cap was reached. */
  rejected_429: number;
  /**
   * Admissions that took in-flight past the cap. Only possible with over-cap policy "admit", the
   * mode for proving a caller's own quota never over-admits without the mock's 429s masking it;
   * with "reject" an over-cap request is a 429 instead (see rejected_429).
   */
  violations: number;
  /** Ended because the client disconnected mid-answer. */
  aborted: number;
  /** Answered with an error status other than a cap 429 (scripted errors, bad requests, auth). */
  errors: number;
  /** Connections cut on purpose (`drop_after_tokens`). */
  dropped: number;
  cap: number | null;
  over_cap: OverCapPolicy;
}

export interface Slot {
  /** Idempotent. */
  release(outcome: "completed" | "aborted" | "dropped" | "error"): void;
}

export class SlotTable {
  private inFlight = 0;
  private counters = this.zero();

  constructor(
    private cap: number | null,
    private overCap: OverCapPolicy,
  ) {}

  private zero() {
    return { requests: 0, completed: 0, maxSeen: 0, rejected: 0, violations: 0, aborted: 0, errors: 0, dropped: 0 };
  }

  countRequest(): void {
    this.counters.requests++;
  }

  countError(): void {
    this.counters.errors++;
  }

  /** A slot, or null when the cap is reached and the policy is to reject (the caller answers 429). */
  tryAdmit(): Slot | null {
    if (this.cap !== null && this.inFlight >= this.cap) {
      if (this.overCap === "reject") {
        this.counters.rejected++;
        return null;
      }
      this.counters.violations++;
    }
    this.inFlight++;
    this.counters.maxSeen = Math.max(this.counters.maxSeen, this.inFlight);
    let released = false;
    return {
      release: (outcome) => {
        if (released) return;
        released = true;
        this.inFlight--;
        if (outcome === "completed") this.counters.completed++;
        else if (outcome === "aborted") this.counters.aborted++;
        else if (outcome === "dropped") this.counters.dropped++;
        // "error": the request handler counts it once, when it answers the error.
      },
    };
  }

  setCap(cap: number | null, overCap?: OverCapPolicy): void {
    this.cap = cap;
    if (overCap) this.overCap = overCap;
  }

  /** Zeroes the counters; in-flight is live state and stays, and becomes the new peak. */
  reset(): void {
    this.counters = this.zero();
    this.counters.maxSeen = this.inFlight;
  }

  stats(): MockStats {
    const c = this.counters;
    return {
      requests: c.requests,
      completed: c.completed,
      in_flight: this.inFlight,
      max_concurrency_seen: c.maxSeen,
      rejected_429: c.rejected,
      violations: c.violations,
      aborted: c.aborted,
      errors: c.errors,
      dropped: c.dropped,
      cap: this.cap,
      over_cap: this.overCap,
    };
  }
}
