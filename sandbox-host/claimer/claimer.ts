/**
 * The claimer: takes a job only when a run slot is free, and only a one-row claim hit counts.
 *
 * Wake path: read the due entries of the ready index (a Redis ZSET the gateway fills, scored by
 * when each job becomes runnable) and, when there are any, run the fenced claim statement for as
 * many jobs as there are free slots. The statement chooses which jobs, in admission order (fair
 * share across tenants, priority, keys, caps: src/db/ownership-repo.ts claimFromPostgres), so
 * every path — index, NOTIFY, the sweep, Redis down — admits alike. An entry is removed after a
 * claim took its job, or when Postgres says the job is no longer claimable (stale entry). A Redis
 * read is never ownership. A delayed job's wake-up is its entry coming due.
 *
 * Poll cadence: 25 ms while the index has candidates, stretching ×1.5 per empty pass to 250 ms
 * when the index is empty (back to 250 ms in ~0.5 s). Numbers from this machine: a ZRANGE through
 * the Upstash REST bridge costs ~1.3 ms, so a host polling at 250 ms spends ~4 requests/s (≈0.5%
 * of a core) and picks up a job ~125 ms after enqueue on average; at a constant 25 ms it would be
 * ~40 requests/s per host for a ~12 ms gain — paid only while there is work around. With the
 * fleet idle it does not poll at all (below).
 *
 * Backstops: every ~1.5 s (jittered) a Postgres sweep claims jobs older than ~2 s that no index
 * entry pointed at (lost entries). When Redis is unreachable the loop polls Postgres instead
 * (SKIP LOCKED candidates, no age limit) and probes Redis once a second to go back.
 *
 * While the fleet is idle (lifecycle/activity.ts: nothing waiting, claimed or running anywhere at
 * the last look, and LISTEN up) there is nothing to poll or sweep for: every new job is announced
 * and tried at once through `hint`, and one the announcement missed is seen by the reaper's next
 * look, which ends idleness and wakes this loop (its sweep follows one sweep period later). So an
 * idle claimer sends nothing; it only wakes every HOST_IDLE_MS to check it is still idle. With
 * work around, every pass is what it was before idleness existed.
 *
 * All claiming happens in this one loop, so the capacity check and the claims it admits can
 * never interleave with another claim pass of the same host.
 */
import { randomUUID } from "node:crypto";
import type { Db } from "../../src/db/client";
import { claimFromPostgres, stillClaimable } from "../../src/db/ownership-repo";
import { TimeoutError, withTimeout } from "../../src/domain/async";
import { jitter } from "../../src/domain/backoff";
import type { ExecutionIdentity } from "../../src/domain/identity";
import { isUuid } from "../../src/domain/uuid";
import type { RedisKeys } from "../../src/quota/keys";
import type { Redis } from "../../src/quota/redis";
import type { FleetActivity } from "../lifecycle/activity";
import type { Service } from "../lifecycle/service";
import { errorFields, type Logger } from "../log";
import type { ClaimSource, HostMetrics } from "../metrics/metrics";

export interface ClaimTarget {
  readonly free: number;
  /** Run a won claim under its identity (made here, once: the run carries it unchanged). */
  start(id: ExecutionIdentity): void;
  onSlotFreed(listener: () => void): () => void;
}

export interface ClaimerOptions {
  db: Db;
  redis: Redis;
  keys: RedisKeys;
  hostId: string;
  runner: ClaimTarget;
  log: Logger;
  metrics: HostMetrics;
  pollMs: number;
  idlePollMs: number;
  sweepMs: number;
  sweepOlderThanMs: number;
  /** A Redis call slower than this counts as Redis down (default 1000 ms). */
  redisTimeoutMs?: number;
  /** While Redis is down, try it again this often (default 1000 ms). */
  redisProbeMs?: number;
  /** Index entries read per pass beyond the free slots, to get past entries other hosts are taking. */
  extraCandidates?: number;
  /** Whether the fleet is idle (no polling then); without it the claimer always polls. */
  activity?: FleetActivity;
  /** Slots kept for newcomers (HOST_RESERVED_SLOTS): every claim passes it to the statement. */
  reservedSlots?: number;
}

type RedisState = { up: true } | { up: false; since: number; lastProbe: number };

export class Claimer implements Service {
  readonly name = "claimer";
  private stopped = true;
  private loop: Promise<void> | null = null;
  private wakeSleep: (() => void) | null = null;
  private delay: number;
  private nextSweepAt = 0;
  private redisState: RedisState = { up: true };
  /** A Redis request we stopped waiting for; while it hangs we do not send another. */
  private redisHung: Promise<unknown> | null = null;
  private unsubscribe: (() => void) | null = null;
  /** Jobs Postgres just announced as claimable (LISTEN ear_ready), tried before the index. */
  private readonly hints = new Set<string>();
  /** Jobs the current pass claimed (so its index prune does not count them as lost). */
  private readonly claimedThisPass = new Set<string>();

  constructor(private readonly opts: ClaimerOptions) {
    this.delay = opts.pollMs;
  }

  get redisUp(): boolean {
    return this.redisState.up;
  }

  start(): void {
    if (!this.stopped) return;
    this.stopped = false;
    this.nextSweepAt = Date.now() + jitter(this.opts.sweepMs);
    const unsubscribeSlots = this.opts.runner.onSlotFreed(() => this.wake());
    const unsubscribeWork = this.opts.activity?.onWork(() => this.wake());
    this.unsubscribe = () => {
      unsubscribeSlots();
      unsubscribeWork?.();
    };
    this.loop = this.run();
  }

  /** Stop admission: no claim starts after this resolves. */
  async stop(): Promise<void> {
    this.stopped = true;
    this.unsubscribe?.();
    this.wake();
    await this.loop;
  }

  wake(): void {
    this.wakeSleep?.();
  }

  /** A job that just became claimable: try it on the next pass, right away. */
  hint(jobId: string): void {
    if (this.stopped || this.hints.size >= 1000) return;
    this.hints.add(jobId);
    this.wake();
  }

  private async run(): Promise<void> {
    while (!this.stopped) {
      let found = false;
      // Idle: no pass. A hint never waits out an idle sleep: one added mid-pass is seen here, and
      // the announcement that brought it had ended idleness before it was added.
      if (this.opts.activity?.idle === true && this.hints.size === 0) {
        // The sweep comes one period after the wake-up, not in the first pass: an announced job
        // is claimed without a sweep statement before it.
        this.nextSweepAt = Date.now() + jitter(this.opts.sweepMs);
        await this.sleep(this.opts.activity.idleMs);
        continue;
      }
      if (this.opts.runner.free > 0) {
        try {
          found = await this.pass();
        } catch (err) {
          this.opts.log.warn("claim pass failed", errorFields(err));
        }
      }
      if (this.stopped) break;
      this.delay = found ? this.opts.pollMs : Math.min(this.opts.idlePollMs, Math.ceil(this.delay * 1.5));
      // No free slot: sleep until one frees (the runner wakes us) or the next pass is due anyway.
      await this.sleep(this.delay);
    }
  }

  /** One claim pass. Returns whether there was anything to claim (keeps the short cadence). */
  private async pass(): Promise<boolean> {
    this.claimedThisPass.clear();
    if (Date.now() >= this.nextSweepAt) {
      this.nextSweepAt = Date.now() + jitter(this.opts.sweepMs);
      if (this.redisState.up) await this.claimFromPostgres("sweep", this.opts.sweepOlderThanMs);
    }
    if (this.opts.runner.free === 0) return true;

    // An announcement (NOTIFY) is a reason to claim now, not a choice of job: the claim statement
    // picks fairly among everything runnable (src/db/ownership-repo.ts claimFromPostgres).
    let won = 0;
    if (this.hints.size > 0) {
      this.hints.clear();
      won += await this.claimFromPostgres("notify", 0);
    }
    if (this.opts.runner.free === 0) return true;

    const due = await this.readIndex();
    if (due === null) return (await this.claimFromPostgres("poll", 0)) + won > 0;
    if (due.length === 0) return won > 0;
    const claimed = await this.claimFromPostgres("index", 0);
    // Slots left free with due entries read: those entries are stale (finished, gone), held back
    // (a key or the tenant's cap) or another host's by now. Drop the ones Postgres no longer has
    // as claimable; the held-back ones stay, and the cadence stretches while nothing is won.
    if (this.opts.runner.free > 0) await this.pruneIndex(due);
    return claimed + won > 0;
  }

  /** The oldest due entries of the ready index (score ≤ now), or null while Redis is unreachable. */
  private async readIndex(): Promise<string[] | null> {
    const state = this.redisState;
    const now = Date.now();
    if (!state.up && now - state.lastProbe < (this.opts.redisProbeMs ?? 1000)) return null;
    if (this.redisHung) return this.markRedisDown(new Error("an earlier Redis request is still hanging"));
    if (!state.up) state.lastProbe = now;
    const count = this.opts.runner.free + (this.opts.extraCandidates ?? 8);
    const request = this.opts.redis.zrange<string[]>(this.opts.keys.readyIndex(), "-inf", now, {
      byScore: true,
      offset: 0,
      count,
    });
    try {
      const ids = await withTimeout(request, this.opts.redisTimeoutMs ?? 1000);
      if (!this.redisState.up) {
        this.opts.log.info("Redis is back; claiming from the ready index again", {
          down_ms: Date.now() - this.redisState.since,
        });
        this.redisState = { up: true };
      }
      return ids.map(String);
    } catch (err) {
      if (err instanceof TimeoutError) {
        this.redisHung = request
          .catch(() => {})
          .finally(() => {
            this.redisHung = null;
          });
      }
      return this.markRedisDown(err);
    }
  }

  private markRedisDown(err: unknown): null {
    if (this.redisState.up) {
      this.opts.log.warn("Redis unreachable; polling Postgres for jobs", errorFields(err));
      this.redisState = { up: false, since: Date.now(), lastProbe: Date.now() };
    }
    return null;
  }

  /** Removes the entries among `jobIds` that name no claimable job any more (one read). */
  private async pruneIndex(jobIds: string[]): Promise<void> {
    const wellFormed = jobIds.filter((id) => isUuid(id) && !this.claimedThisPass.has(id));
    const malformed = jobIds.filter((id) => !isUuid(id));
    for (const entry of malformed)
      this.opts.log.warn("removing a malformed ready-index entry", { entry: entry.slice(0, 100) });
    const live = await stillClaimable(this.opts.db, wellFormed);
    const gone = wellFormed.filter((id) => !live.has(id));
    // Due entries this pass read and did not claim, whose job is no longer claimable: another
    // claimer took it first (or it ended). The races the fence settles, counted as `lost`.
    if (gone.length > 0) this.opts.metrics.claims.inc({ source: "index", result: "lost" }, gone.length);
    this.removeFromIndex([...malformed, ...gone]);
  }

  private async claimFromPostgres(source: ClaimSource, olderThanMs: number): Promise<number> {
    const free = this.opts.runner.free;
    if (free === 0 || this.stopped) return 0;
    const tokens = Array.from({ length: free }, () => randomUUID());
    const claimed = await claimFromPostgres(
      this.opts.db,
      this.opts.hostId,
      tokens,
      olderThanMs,
      this.opts.reservedSlots ?? 0,
    );
    if (claimed.length > 0) this.opts.activity?.noteWork();
    for (const claim of claimed) {
      this.opts.metrics.claims.inc({ source, result: "won" });
      // The identity of the run from here to its last write: the claim, this host, and the id its
      // execution will have if the started CAS hits.
      this.opts.runner.start({ ...claim, host: this.opts.hostId, executionId: randomUUID() });
      this.claimedThisPass.add(claim.jobId);
    }
    if (this.redisState.up && claimed.length > 0) this.removeFromIndex(claimed.map((c) => c.jobId));
    if (claimed.length > 0 && source === "sweep") {
      this.opts.log.info("sweep claimed jobs the ready index did not name", { jobs: claimed.map((c) => c.jobId) });
    }
    return claimed.length;
  }

  /** Fire and forget: a failed ZREM leaves entries the next claimer drops as stale. */
  private removeFromIndex(jobIds: string[]): void {
    const [first, ...rest] = jobIds;
    if (first === undefined) return;
    withTimeout(
      this.opts.redis.zrem(this.opts.keys.readyIndex(), first, ...rest),
      this.opts.redisTimeoutMs ?? 1000,
    ).catch((err: unknown) =>
      this.opts.log.warn("ZREM of ready-index entries failed", { job_ids: jobIds, ...errorFields(err) }),
    );
  }

  private sleep(ms: number): Promise<void> {
    if (this.stopped) return Promise.resolve();
    return new Promise((resolve) => {
      const timer = setTimeout(done, ms);
      function done() {
        clearTimeout(timer);
        resolve();
      }
      this.wakeSleep = () => {
        this.wakeSleep = null;
        done();
      };
    });
  }
}
