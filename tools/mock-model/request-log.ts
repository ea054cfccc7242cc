/**
 * Who asked the mock model what, and how it ended: the last `capacity` completion requests, each
 * with a prefix of its first and last user message. Counters (slots.ts) say how many requests
 * came; this says which run made them. A run's first user message is its prompt and stays the
 * same across its turns, so a test that puts a unique marker there can count one run's model
 * calls (test/integration/quota-chaos.test.ts: a holder frozen past its lease makes no further
 * call). `GET /requests?contains=TEXT` filters on either message.
 */

export type RequestOutcome = "in_flight" | "completed" | "aborted" | "dropped" | "error" | "rejected_429";

export interface LoggedRequest {
  /** 1-based, in arrival order since the last reset. */
  seq: number;
  /** Arrival, ms since the epoch. */
  at: number;
  /** Up to PREFIX_CHARS of the first and the last user message. */
  first_user: string;
  last_user: string;
  messages: number;
  outcome: RequestOutcome;
  ended_at: number | null;
}

const PREFIX_CHARS = 200;

export class RequestLog {
  private entries: LoggedRequest[] = [];
  private seq = 0;

  constructor(private readonly capacity = 2000) {}

  /** Record an arrival; the returned function records how it ended (first call wins). */
  add(userTexts: string[], messages: number): (outcome: Exclude<RequestOutcome, "in_flight">) => void {
    const entry: LoggedRequest = {
      seq: ++this.seq,
      at: Date.now(),
      first_user: (userTexts[0] ?? "").slice(0, PREFIX_CHARS),
      last_user: (userTexts[userTexts.length - 1] ?? "").slice(0, PREFIX_CHARS),
      messages,
      outcome: "in_flight",
      ended_at: null,
    };
    this.entries.push(entry);
    if (this.entries.length > this.capacity) this.entries.splice(0, this.entries.length - this.capacity);
    return (outcome) => {
      if (entry.outcome !== "in_flight") return;
      entry.outcome = outcome;
      entry.ended_at = Date.now();
    };
  }

  list(contains?: string): LoggedRequest[] {
    const all = this.entries.map((e) => ({ ...e }));
    return contains ? all.filter((e) => e.first_user.includes(contains) || e.last_user.includes(contains)) : all;
  }

  reset(): void {
    this.entries = [];
    this.seq = 0;
  }
}
