/**
 * Waiting for quota: bounded, visible, fair enough, never a busy spin.
 *
 * A refused holder joins the key's waiter queue (acquire.lua): it keeps its arrival ticket while
 * it polls, and a free slot goes to the first `free + slack` waiters in ticket order, so
 * admission follows arrival order across hosts, give or take `slack` places. Between polls it
 * sleeps with jitter, longer the further back it is (paced by how fast its place in the queue
 * moved since its last poll, capped), and a release by this process wakes the best-placed local
 * waiter of that key at once.
 * Why a slack: without push notifications a freed slot waits for the head's next poll; letting
 * the few awake waiters just behind it take the slot kept ≥ 95 % of the limit in use in
 * tools/bench/quota.ts, where strict order (slack 0) kept ~45 % (20 ms holds; see docs/quota.md). Redis unreachable → fail closed: no admission, the
 * breaker refuses locally, and the waiter backs off exponentially until it answers again.
 * Every change of reason is reported once through `onWaiting` (the runner turns it into a
 * `quota.waiting` event).
 */
import { backoffDelay, jitter } from "../domain/backoff";
import type { AcquireResult, BudgetDemand, LeaseStore, QuotaDemand, QuotaLease } from "./lease-store";

export type QuotaWaitingReason = "limit_reached" | "redis_unavailable";

export interface QuotaWaitingInfo {
  reason: QuotaWaitingReason;
  /** The quota key that refused (limit_reached). */
  key?: string;
  /** Waiters ahead on that key (limit_reached). */
  ahead?: number;
  waitedMs: number;
}

export type WaitOutcome =
  | { kind: "admitted"; lease: QuotaLease; waitedMs: number; polls: number }
  | { kind: "timed_out"; reason: QuotaWaitingReason; waitedMs: number; polls: number }
  | { kind: "aborted"; waitedMs: number; polls: number }
  /** A budget refused: waiting would not help (spend only grows until the budget changes). */
  | {
      kind: "budget_exhausted";
      key: string;
      spentNano: number;
      reservedNano: number;
      limitNano: number;
      waitedMs: number;
      polls: number;
    };

export interface AcquireWithWaitOptions {
  holder: string;
  demands: readonly QuotaDemand[];
  /** Budget reservations taken in the same atomic acquire as the slots (lease-store.ts). */
  budgets?: readonly BudgetDemand[];
  /** Give up after this long (the runner fails the run or reports it; never waits forever). */
  maxWaitMs: number;
  signal?: AbortSignal;
  onWaiting?: (info: QuotaWaitingInfo) => void;
  /**
   * Poll interval while queued (default 5 / 500 ms): baseMs near the head, else about half the
   * time the queue's observed pace needs to bring the waiter within reach; jittered ±50 %.
   */
  poll?: { baseMs?: number; maxMs?: number };
  /** Backoff while Redis is unavailable (full jitter, 100 → 2000 ms). */
  unavailableBackoff?: { baseMs: number; maxMs: number };
  /**
   * Places a waiter may overtake, as a fraction of each key's limit (default 0.5, i.e. 5 for a
   * limit of 10); 0 = strict arrival order. An explicit `slack` on a demand wins.
   */
  slackRatio?: number;
  /**
   * Join the fair waiter queue (default true). false = plain retries in whatever order the polls
   * land: only for measuring what the queue buys (test/integration/quota-wait.test.ts).
   */
  queue?: boolean;
  /** Monotonic clock (default performance.now). */
  now?: () => number;
}

export async function acquireWithWait(store: LeaseStore, opts: AcquireWithWaitOptions): Promise<WaitOutcome> {
  const now = opts.now ?? (() => performance.now());
  const started = now();
  const pollBase = opts.poll?.baseMs ?? 5;
  const pollMax = opts.poll?.maxMs ?? 500;
  const unavailable = opts.unavailableBackoff ?? { baseMs: 100, maxMs: 2000 };
  const hub = wakeHub(store);
  const slackRatio = opts.slackRatio ?? 0.5;
  const demands = opts.demands.map((d) => ({ ...d, slack: d.slack ?? Math.floor(d.limit * slackRatio) }));
  const quotaKeys = demands.map((d) => d.key);
  let lastReason: QuotaWaitingReason | null = null;
  let failures = 0;
  let polls = 0;
  let prev: { key: string; ahead: number; at: number } | null = null;

  const leaveQueue = () => store.release({ holder: opts.holder, keys: quotaKeys });

  for (;;) {
    if (opts.signal?.aborted) {
      await leaveQueue();
      return { kind: "aborted", waitedMs: now() - started, polls };
    }
    polls += 1;
    const result: AcquireResult = await store.acquire(opts.holder, demands, {
      queue: opts.queue ?? true,
      ...(opts.budgets ? { budgets: opts.budgets } : {}),
    });
    const waitedMs = now() - started;
    if (result.admitted) return { kind: "admitted", lease: result.lease, waitedMs, polls };
    if (result.reason === "budget_exhausted") {
      await leaveQueue();
      const { key, spentNano, reservedNano, limitNano } = result;
      return { kind: "budget_exhausted", key, spentNano, reservedNano, limitNano, waitedMs, polls };
    }

    let delay: number;
    if (result.reason === "limit_reached") {
      failures = 0;
      // Sleep about half the time the queue needs to bring this waiter within reach, paced by
      // how fast places in this key's queue have been moving (observed by this host's waiters):
      // 20 ms holds → sleeps of a few ms, minute-long model calls → long sleeps, cheap polling.
      const slack = demands.find((d) => d.key === result.key)?.slack ?? 0;
      const excess = Math.max(0, result.ahead - slack);
      const t = now();
      if (prev && prev.key === result.key) hub.observe(result.key, prev.ahead - result.ahead, t - prev.at);
      const rate = hub.rate(result.key);
      const estimate = excess === 0 ? pollBase : rate > 0 ? (0.5 * excess) / rate : pollBase * (1 + excess);
      delay = jitter(Math.min(pollMax, Math.max(pollBase, estimate)), 0.5);
      prev = { key: result.key, ahead: result.ahead, at: t };
      if (lastReason !== "limit_reached") {
        opts.onWaiting?.({ reason: "limit_reached", key: result.key, ahead: result.ahead, waitedMs });
      }
    } else {
      delay = Math.max(store.breaker().retryInMs, backoffDelay(failures, unavailable));
      failures += 1;
      if (lastReason !== "redis_unavailable") opts.onWaiting?.({ reason: "redis_unavailable", waitedMs });
    }
    lastReason = result.reason;

    const left = opts.maxWaitMs - waitedMs;
    if (left <= 0) {
      // Best effort: leave the queue (and drop a lease whose grant reply was lost in transit).
      await leaveQueue();
      return { kind: "timed_out", reason: lastReason, waitedMs, polls };
    }
    const rank = result.reason === "limit_reached" ? result.ahead : Number.POSITIVE_INFINITY;
    await hub.sleep(quotaKeys, rank, Math.max(1, Math.min(delay, left)), opts.signal);
  }
}

interface Sleeper {
  keys: readonly string[];
  /** Waiters ahead of it at its last poll: the best-placed local waiter is woken first. */
  rank: number;
  wake: () => void;
}

/** Per store: wakes the best-placed local sleeper of a key when this process frees a slot there. */
const hubs = new WeakMap<LeaseStore, ReturnType<typeof createWakeHub>>();

function wakeHub(store: LeaseStore) {
  let hub = hubs.get(store);
  if (!hub) {
    hub = createWakeHub();
    store.onFreed(hub.freed);
    hubs.set(store, hub);
  }
  return hub;
}

function createWakeHub() {
  // Ranks are as of each sleeper's last poll: a hint for whom to wake; Redis's queue decides who
  // is really admitted. A linear scan: a host has tens of waiters, not thousands.
  const sleepers = new Set<Sleeper>();
  /** Places per ms the queue of each key has moved, as an EWMA over this host's waiters. */
  const rates = new Map<string, number>();
  return {
    observe(key: string, moved: number, ms: number) {
      if (ms <= 0 || moved < 0) return;
      const sample = moved / ms;
      const old = rates.get(key);
      rates.set(key, old === undefined ? sample : 0.8 * old + 0.2 * sample);
    },
    rate: (key: string) => rates.get(key) ?? 0,
    freed(quotaKeys: readonly string[]) {
      for (const key of quotaKeys) {
        let best: Sleeper | undefined;
        for (const s of sleepers) {
          if (s.keys.includes(key) && (!best || s.rank < best.rank)) best = s;
        }
        best?.wake();
      }
    },
    sleep(keys: readonly string[], rank: number, ms: number, signal?: AbortSignal): Promise<void> {
      return new Promise<void>((resolve) => {
        const sleeper: Sleeper = { keys, rank, wake: () => done() };
        const timer = setTimeout(() => done(), ms);
        const onAbort = () => done();
        function done() {
          clearTimeout(timer);
          sleepers.delete(sleeper);
          signal?.removeEventListener("abort", onAbort);
          resolve();
        }
        sleepers.add(sleeper);
        signal?.addEventListener("abort", onAbort, { once: true });
      });
    },
  };
}
