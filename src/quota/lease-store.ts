/**
 * Global model quota as named leases.
 *
 * One ZSET per quota key: member = holder (the execution id), score = its last heartbeat on the
 * Redis server's clock. A leaked slot is reclaimable because it is named and timed: a holder
 * that stops renewing is purged by the next acquire once its lease is older than the lease
 * timeout. An anonymous INCR/DECR counter cannot tell a dead +1 from a live one and leaks
 * (`npm run demo:quota`, tools/cli/demo-quota.ts, shows it). All three operations are single Lua scripts (./lua).
 *
 * Holder-side rule the caller must follow: a lease is usable only while `isValid(lease)`; its
 * local deadline is the moment the acquire/renew was SENT plus the lease timeout, which is never
 * later than the server-side expiry, so a holder paused past its lease (SIGSTOP, a blocked event
 * loop) knows it is lost before its next model call, without asking Redis.
 */
import { DEFAULT_HEARTBEAT_MS } from "../domain/recovery";
import { type BreakerOptions, type BreakerSnapshot, CircuitBreaker } from "./breaker";
import { type RedisKeys, redisKeys } from "./keys";
import { QuotaProtocolError, QuotaUnavailableError } from "./quota-errors";
import type { Redis } from "./redis";
import { isLuaRunner, type LuaRunner, type QuotaScripts, upstashLuaRunner } from "./scripts";

/** One quota a holder needs, e.g. `{ key: "model:gpt-x", limit: 10 }` or a per-tenant key. */
export interface QuotaDemand {
  key: string;
  limit: number;
  /**
   * Queued waiters a holder may overtake on this key (default 0: strict arrival order).
   * acquireWithWait sets it from its `fairness` option.
   */
  slack?: number;
}

/**
 * A call's budget reservation (docs/quota.md, "Budgets: reserve, then settle"), in integer
 * nano-USD (1e-9 $: a token at $0.15 per million tokens is 150 nano-USD, exact).
 */
export interface BudgetDemand {
  /**
   * A budget key (budgetKeys in keys.ts), e.g. the tenant's UTC day. The scripts do not know
   * units: a token budget (budgetKeys.treeTokens) counts tokens in the same fields.
   */
  key: string;
  limitNano: number;
  /** The call's worst case: its prompt as counted plus its max output tokens, priced. */
  amountNano: number;
  /** The spend the ledger (Postgres) knows of: the Redis counter never counts from below it. */
  floorNano: number;
  /** How long the budget's counter outlives its last write. */
  ttlMs: number;
}

/** What one call really cost, for each budget it reserved on. */
export interface BudgetSettle {
  key: string;
  amountNano: number;
  ttlMs: number;
}

export interface QuotaLease {
  holder: string;
  /** Quota keys (not Redis keys) this lease holds a slot on. */
  keys: readonly string[];
  /** Budget keys this holder reserved on (renewed with the lease; settled, not released). */
  budgets?: readonly string[];
  /** Local monotonic deadline (store clock): past it, the holder must treat the lease as lost. */
  validUntil: number;
}

export type AcquireResult =
  | { admitted: true; lease: QuotaLease; serverTimeMs: number }
  | {
      admitted: false;
      reason: "limit_reached";
      /** The quota key that refused. */
      key: string;
      /** Waiters queued before this holder on that key. */
      ahead: number;
      /** Free slots on that key at that moment. */
      free: number;
    }
  | { admitted: false; reason: "redis_unavailable"; error: QuotaUnavailableError }
  | {
      admitted: false;
      /** Every slot was free, but this budget's settled spend plus its reservations reached its limit. */
      reason: "budget_exhausted";
      key: string;
      spentNano: number;
      reservedNano: number;
      limitNano: number;
    };

export interface RenewResult {
  renewed: QuotaLease[];
  /** Leases Redis no longer had (expired or purged): the holder must stop its model calls. */
  lost: QuotaLease[];
}

export interface LeaseStoreStats {
  admitted: number;
  refused: number;
  unavailable: number;
  renewed: number;
  lost: number;
  released: number;
  /** Calls admitted with budget reservations, refused by a budget, and settlements counted / repeated. */
  reserved: number;
  budgetRefused: number;
  settled: number;
  settledAgain: number;
}

export interface LeaseStoreOptions {
  /** Host heartbeat interval (default: the hosts' own, DEFAULT_HEARTBEAT_MS, src/domain/recovery.ts). */
  heartbeatIntervalMs?: number;
  /** Lease timeout (default 3 × heartbeat interval: two heartbeats may be late or lost). */
  leaseTimeoutMs?: number;
  /** A waiter that has not polled for this long loses its place in the queue (default = lease timeout). */
  waiterTimeoutMs?: number;
  keys?: RedisKeys;
  breaker?: CircuitBreaker | BreakerOptions;
  /** Monotonic clock in ms for local deadlines (default performance.now). */
  now?: () => number;
}

export interface LeaseStore {
  readonly leaseTimeoutMs: number;
  readonly heartbeatIntervalMs: number;
  /**
   * Atomic on all demands: admitted everywhere or nowhere. Retrying with the same holder while it
   * holds is idempotent (no second slot). `queue: true` joins the fair waiter queue when refused
   * (acquireWithWait does this); without it a refused holder leaves no trace.
   */
  acquire(
    holder: string,
    demands: readonly QuotaDemand[],
    opts?: { queue?: boolean; budgets?: readonly BudgetDemand[] },
  ): Promise<AcquireResult>;
  /**
   * End the holder's budget reservations with what its call really cost: counted once per
   * holder, whatever the retries. "unavailable": Redis could not be asked (the reservation then
   * expires, and the ledger in Postgres still has the call). Never throws.
   */
  settle(holder: string, settles: readonly BudgetSettle[]): Promise<"counted" | "repeated" | "unavailable">;
  /** One round trip for all leases of a host. Throws QuotaUnavailableError when Redis cannot be asked. */
  renew(leases: readonly QuotaLease[]): Promise<RenewResult>;
  /**
   * Frees the holder's slots and its place in any waiter queue. Harmless when already gone.
   * Never throws: if Redis is unreachable the lease simply expires. Resolves whether a slot was freed.
   */
  release(lease: Pick<QuotaLease, "holder" | "keys">): Promise<boolean>;
  isValid(lease: QuotaLease): boolean;
  breaker(): BreakerSnapshot;
  stats(): LeaseStoreStats;
  /** Local notification that slots on these quota keys were freed by this store (release or lost). */
  onFreed(listener: (quotaKeys: readonly string[]) => void): () => void;
}

export function createLeaseStore(
  redis: Redis | LuaRunner,
  scripts: QuotaScripts,
  opts: LeaseStoreOptions = {},
): LeaseStore {
  const runner = isLuaRunner(redis) ? redis : upstashLuaRunner(redis);
  const heartbeatIntervalMs = opts.heartbeatIntervalMs ?? DEFAULT_HEARTBEAT_MS;
  const leaseTimeoutMs = opts.leaseTimeoutMs ?? 3 * heartbeatIntervalMs;
  const waiterTimeoutMs = opts.waiterTimeoutMs ?? leaseTimeoutMs;
  if (!(leaseTimeoutMs > 0) || !(waiterTimeoutMs > 0)) throw new RangeError("lease and waiter timeouts must be > 0");
  const keys = opts.keys ?? redisKeys();
  const now = opts.now ?? (() => performance.now());
  const breaker = opts.breaker instanceof CircuitBreaker ? opts.breaker : new CircuitBreaker({ now, ...opts.breaker });
  const listeners = new Set<(quotaKeys: readonly string[]) => void>();
  const counters: LeaseStoreStats = {
    admitted: 0,
    refused: 0,
    unavailable: 0,
    renewed: 0,
    lost: 0,
    released: 0,
    reserved: 0,
    budgetRefused: 0,
    settled: 0,
    settledAgain: 0,
  };
  const budgetTriple = (b: string) => [keys.budgetReservations(b), keys.budgetAmounts(b), keys.budgetSpent(b)];

  const triples = (quotaKeys: readonly string[]) =>
    quotaKeys.flatMap((k) => [keys.quotaLeases(k), keys.quotaWaiters(k), keys.quotaWaitersSeen(k)]);
  const freed = (quotaKeys: readonly string[]) => {
    for (const l of listeners) l(quotaKeys);
  };

  return {
    leaseTimeoutMs,
    heartbeatIntervalMs,

    async acquire(holder, demands, { queue = false, budgets = [] } = {}): Promise<AcquireResult> {
      if (demands.length === 0 && budgets.length === 0) throw new RangeError("acquire needs a quota or budget demand");
      for (const b of budgets) {
        for (const v of [b.limitNano, b.amountNano, b.floorNano, b.ttlMs]) {
          if (!Number.isSafeInteger(v) || v < 0) throw new RangeError(`invalid budget figure for ${b.key}: ${v}`);
        }
      }
      for (const d of demands) {
        if (!Number.isInteger(d.limit) || d.limit < 0) throw new RangeError(`invalid limit for ${d.key}: ${d.limit}`);
        if (d.slack !== undefined && !(Number.isInteger(d.slack) && d.slack >= 0)) {
          throw new RangeError(`invalid slack for ${d.key}: ${d.slack}`);
        }
      }
      const quotaKeys = demands.map((d) => d.key);
      const sentAt = now();
      let reply: unknown;
      try {
        reply = await breaker.run(() =>
          runner.evalScript(
            scripts.acquire,
            [...triples(quotaKeys), ...budgets.flatMap((b) => budgetTriple(b.key))],
            [
              holder,
              String(leaseTimeoutMs),
              String(waiterTimeoutMs),
              queue ? "1" : "0",
              ...demands.flatMap((d) => [String(d.limit), String(d.slack ?? 0)]),
              ...budgets.flatMap((b) => [b.limitNano, b.amountNano, b.floorNano, b.ttlMs].map(String)),
              String(budgets.length),
            ],
          ),
        );
      } catch (err) {
        counters.unavailable += 1;
        return { admitted: false, reason: "redis_unavailable", error: asUnavailable(err) };
      }
      const [ok = 0, serverTimeMs = 0, refusedAt = 0, ahead = 0, free = 0] = intArray(reply, "acquire", 5);
      if (ok === 1) {
        counters.admitted += 1;
        if (budgets.length > 0) counters.reserved += 1;
        return {
          admitted: true,
          serverTimeMs,
          lease: {
            holder,
            keys: quotaKeys,
            ...(budgets.length > 0 ? { budgets: budgets.map((b) => b.key) } : {}),
            validUntil: sentAt + leaseTimeoutMs,
          },
        };
      }
      if (ok === 2) {
        const budget = budgets[refusedAt - 1];
        if (budget === undefined) throw new QuotaProtocolError(`acquire refused at budget index ${refusedAt}`);
        counters.budgetRefused += 1;
        return {
          admitted: false,
          reason: "budget_exhausted",
          key: budget.key,
          spentNano: ahead,
          reservedNano: free,
          limitNano: budget.limitNano,
        };
      }
      const key = quotaKeys[refusedAt - 1];
      if (key === undefined) throw new QuotaProtocolError(`acquire refused at key index ${refusedAt}`);
      counters.refused += 1;
      return { admitted: false, reason: "limit_reached", key, ahead, free };
    },

    async renew(leases) {
      if (leases.length === 0) return { renewed: [], lost: [] };
      const redisKeyIndex = new Map<string, number>();
      const args = [String(leaseTimeoutMs), String(leases.length)];
      for (const lease of leases) {
        args.push(lease.holder);
        // Its slots (they decide whether it is lost), then its budget reservations (renewed only).
        for (const group of [lease.keys.map(keys.quotaLeases), (lease.budgets ?? []).map(keys.budgetReservations)]) {
          args.push(String(group.length));
          for (const rk of group) {
            let i = redisKeyIndex.get(rk);
            if (i === undefined) {
              i = redisKeyIndex.size + 1;
              redisKeyIndex.set(rk, i);
            }
            args.push(String(i));
          }
        }
      }
      const sentAt = now();
      const reply = await breaker.run(() => runner.evalScript(scripts.renew, [...redisKeyIndex.keys()], args));
      const lostAt = new Set(intArray(reply, "renew"));
      const renewed: QuotaLease[] = [];
      const lost: QuotaLease[] = [];
      leases.forEach((lease, i) => {
        if (lostAt.has(i + 1)) lost.push(lease);
        else {
          lease.validUntil = sentAt + leaseTimeoutMs;
          renewed.push(lease);
        }
      });
      counters.renewed += renewed.length;
      counters.lost += lost.length;
      if (lost.length > 0) freed([...new Set(lost.flatMap((l) => l.keys))]);
      return { renewed, lost };
    },

    async settle(holder, settles) {
      if (settles.length === 0) return "counted";
      try {
        const reply = await breaker.run(() =>
          runner.evalScript(
            scripts.settle,
            [keys.budgetSettled(holder), ...settles.flatMap((s) => budgetTriple(s.key))],
            [
              holder,
              String(SETTLED_MARKER_TTL_MS),
              ...settles.flatMap((s) => [String(Math.max(0, Math.round(s.amountNano))), String(s.ttlMs)]),
            ],
          ),
        );
        if (reply === 1) counters.settled += 1;
        else counters.settledAgain += 1;
        return reply === 1 ? "counted" : "repeated";
      } catch {
        return "unavailable";
      }
    },

    async release(lease) {
      if (lease.keys.length === 0) return false;
      try {
        const removed = await breaker.run(() =>
          runner.evalScript(scripts.release, triples(lease.keys), [lease.holder]),
        );
        if (typeof removed !== "number") throw new QuotaProtocolError(`release returned ${JSON.stringify(removed)}`);
        if (removed > 0) {
          counters.released += 1;
          freed(lease.keys);
        }
        return removed > 0;
      } catch (err) {
        if (err instanceof QuotaProtocolError) throw err;
        return false;
      }
    },

    isValid: (lease) => now() < lease.validUntil,
    breaker: () => breaker.snapshot(),
    stats: () => ({ ...counters }),
    onFreed(listener) {
      listeners.add(listener);
      return () => listeners.delete(listener);
    },
  };
}

/**
 * How long a settled call's marker stays: longer than any settle of the same holder can come late
 * (a host paused for a day would have lost its lease and its job long before).
 */
const SETTLED_MARKER_TTL_MS = 2 * 86_400_000;

function asUnavailable(err: unknown): QuotaUnavailableError {
  return err instanceof QuotaUnavailableError ? err : new QuotaUnavailableError(String(err), { cause: err });
}

function intArray(reply: unknown, script: string, length?: number): number[] {
  if (!Array.isArray(reply) || (length !== undefined && reply.length !== length) || !reply.every(Number.isInteger)) {
    throw new QuotaProtocolError(`${script} returned ${JSON.stringify(reply)}`);
  }
  return reply as number[];
}
