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

export interface QuotaLease {
  holder: string;
  /** Quota keys (not Redis keys) this lease holds a slot on. */
  keys: readonly string[];
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
  | { admitted: false; reason: "redis_unavailable"; error: QuotaUnavailableError };

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
  acquire(holder: string, demands: readonly QuotaDemand[], opts?: { queue?: boolean }): Promise<AcquireResult>;
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
  const counters: LeaseStoreStats = { admitted: 0, refused: 0, unavailable: 0, renewed: 0, lost: 0, released: 0 };

  const triples = (quotaKeys: readonly string[]) =>
    quotaKeys.flatMap((k) => [keys.quotaLeases(k), keys.quotaWaiters(k), keys.quotaWaitersSeen(k)]);
  const freed = (quotaKeys: readonly string[]) => {
    for (const l of listeners) l(quotaKeys);
  };

  return {
    leaseTimeoutMs,
    heartbeatIntervalMs,

    async acquire(holder, demands, { queue = false } = {}): Promise<AcquireResult> {
      if (demands.length === 0) throw new RangeError("acquire needs at least one quota demand");
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
          runner.evalScript(scripts.acquire, triples(quotaKeys), [
            holder,
            String(leaseTimeoutMs),
            String(waiterTimeoutMs),
            queue ? "1" : "0",
            ...demands.flatMap((d) => [String(d.limit), String(d.slack ?? 0)]),
          ]),
        );
      } catch (err) {
        counters.unavailable += 1;
        return { admitted: false, reason: "redis_unavailable", error: asUnavailable(err) };
      }
      const [ok = 0, serverTimeMs = 0, refusedAt = 0, ahead = 0, free = 0] = intArray(reply, "acquire", 5);
      if (ok === 1) {
        counters.admitted += 1;
        return {
          admitted: true,
          serverTimeMs,
          lease: { holder, keys: quotaKeys, validUntil: sentAt + leaseTimeoutMs },
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
        args.push(lease.holder, String(lease.keys.length));
        for (const k of lease.keys) {
          const rk = keys.quotaLeases(k);
          let i = redisKeyIndex.get(rk);
          if (i === undefined) {
            i = redisKeyIndex.size + 1;
            redisKeyIndex.set(rk, i);
          }
          args.push(String(i));
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

    async release(lease) {
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

function asUnavailable(err: unknown): QuotaUnavailableError {
  return err instanceof QuotaUnavailableError ? err : new QuotaUnavailableError(String(err), { cause: err });
}

function intArray(reply: unknown, script: string, length?: number): number[] {
  if (!Array.isArray(reply) || (length !== undefined && reply.length !== length) || !reply.every(Number.isInteger)) {
    throw new QuotaProtocolError(`${script} returned ${JSON.stringify(reply)}`);
  }
  return reply as number[];
}
