/**
 * The host's reaper: runs the recovery pass (src/db/recovery-pass.ts: idempotent CAS SQL) on a
 * jittered interval on every host, so recovery never depends on one particular host being alive
 * (with no host alive at all, the Worker's cron backstop, workers/cron/reaper-backstop.ts, runs
 * the same pass every minute). Each pass:
 *  - releases stale claims, ends waits past their deadline, and marks silent runs `lost` and
 *    overdue runs `timed_out` (the recovery pass), re-indexing what it re-queued;
 *  - ends queued jobs past their ttl_s `expired` (src/db/admission-repo.ts);
 *  - rebuilds the ready index from Postgres when it is due, or at once when Redis lost its data
 *    (detected by a marker key the rebuild sets: FLUSHALL or a restart without persistence
 *    removes it);
 *  - every `purgeMs` (slower: retention is days, not seconds), deletes finished jobs older than
 *    the retention with their executions and inputs, leaving tombstones (src/db/retention-repo.ts).
 *
 * While the fleet is idle (lifecycle/activity.ts) a pass runs every HOST_IDLE_MS instead and
 * starts with one look at the fleet's work: the reaping statements only touch claimed or running
 * jobs and the rebuild only indexes waiting ones, so with none of them anywhere both are skipped
 * (the Redis marker read included). A look that finds work runs them in the same pass and ends
 * idleness. A host without runs in a busy fleet also looks now and then, to learn when it is over.
 */
import { expireOverdue } from "../../src/db/admission-repo";
import type { Db } from "../../src/db/client";
import { fleetWork, readyJobs } from "../../src/db/reaper-repo";
import { type ReapedRun, recoveryPass } from "../../src/db/recovery-pass";
import { purgeFinishedJobs } from "../../src/db/retention-repo";
import { jitter } from "../../src/domain/backoff";
import type { RedisKeys } from "../../src/quota/keys";
import { indexReady } from "../../src/quota/ready-index";
import type { Redis } from "../../src/quota/redis";
import type { FleetActivity, FleetWork } from "../lifecycle/activity";
import { PeriodicTask } from "../lifecycle/periodic";
import type { Service } from "../lifecycle/service";
import { errorFields, type Logger } from "../log";

export interface ReaperOptions {
  db: Db;
  redis: Redis;
  keys: RedisKeys;
  log: Logger;
  intervalMs: number;
  claimTimeoutMs: number;
  runLostAfterMs: number;
  indexRebuildMs: number;
  /** Retention purge interval (0 = this host never purges). */
  purgeMs?: number;
  /** Finished jobs older than this are purged. */
  jobRetentionMs?: number;
  /** Whether the fleet is idle; without it every pass is a busy one. */
  activity?: FleetActivity;
  /** Called for each run this pass declared lost, timed out or recovered. */
  onReaped?: (r: ReapedRun) => void;
}

const REBUILD_BATCH = 1000;

export class Reaper implements Service {
  readonly name = "reaper";
  private nextRebuildAt = 0;
  private nextPurgeAt = 0;
  /** The first pass runs at once (a host starting after a crash recovers its jobs first), then ~every intervalMs ±30%. */
  private readonly loop: PeriodicTask;

  constructor(private readonly opts: ReaperOptions) {
    this.loop = new PeriodicTask(
      {
        name: this.name,
        everyMs: opts.intervalMs,
        spread: 0.3,
        firstDelayMs: 0,
        onError: (err) => opts.log.warn("reaper pass failed", errorFields(err)),
        idle: opts.activity ? { everyMs: opts.activity.idleMs, when: () => opts.activity?.idle === true } : undefined,
      },
      () => this.pass(),
    );
    opts.activity?.onWork(() => this.loop.hurry());
  }

  start(): void {
    this.loop.start();
  }

  stop(): Promise<void> {
    return this.loop.stop();
  }

  /** One reaping pass; safe to run concurrently with other hosts' passes. */
  async pass(): Promise<void> {
    const activity = this.opts.activity;
    if (activity?.idle) {
      const work = await this.look(activity);
      // A failed look knows nothing: the pass runs in full.
      if (work === null || work.claimed || work.running || work.expiring) await this.reap();
      if (work === null || work.waiting) {
        await this.expire();
        await this.maybeRebuildIndex();
      }
      await this.maybePurge();
      return;
    }
    await this.reap();
    await this.expire();
    await this.maybeRebuildIndex();
    await this.maybePurge();
    if (activity?.shouldLook()) await this.look(activity);
  }

  private async look(activity: FleetActivity): Promise<FleetWork | null> {
    const startedAt = activity.lookStarting();
    try {
      // The next look may come 1.3 × HOST_IDLE_MS from now (its jitter): a deadline before then is work.
      const work = await fleetWork(this.opts.db, activity.idleMs * 1.3);
      activity.looked(work, startedAt);
      return work;
    } catch (err) {
      this.opts.log.warn("fleet work look failed", errorFields(err));
      return null;
    }
  }

  private async reap(): Promise<void> {
    const { db, log, claimTimeoutMs, runLostAfterMs } = this.opts;
    try {
      const { reaped } = await recoveryPass({
        db,
        log,
        limits: { claimTimeoutMs, runLostAfterMs },
        reindex: (jobs) => this.index(jobs),
      });
      for (const r of reaped) this.opts.onReaped?.(r);
    } catch (err) {
      log.warn("reaper pass failed", errorFields(err));
    }
  }

  /** Queued jobs past their ttl_s end `expired` (src/db/admission-repo.ts). */
  private async expire(): Promise<void> {
    try {
      const expired = await expireOverdue(this.opts.db);
      if (expired.length > 0) this.opts.log.info("expired jobs not started within their ttl_s", { jobs: expired });
    } catch (err) {
      this.opts.log.warn("expiry sweep failed", errorFields(err));
    }
  }

  private async maybePurge(): Promise<void> {
    const { purgeMs = 0, jobRetentionMs, log } = this.opts;
    if (purgeMs === 0 || jobRetentionMs === undefined || Date.now() < this.nextPurgeAt) return;
    this.nextPurgeAt = Date.now() + jitter(purgeMs);
    try {
      const { purged, batches } = await purgeFinishedJobs(this.opts.db, { olderThanMs: jobRetentionMs });
      if (purged > 0) log.info("purged finished jobs past their retention", { purged, batches });
    } catch (err) {
      log.warn("retention purge failed", errorFields(err));
    }
  }

  private async maybeRebuildIndex(): Promise<void> {
    const { redis, keys, log } = this.opts;
    try {
      const marker = await redis.get(keys.indexMarker());
      const lostData = marker === null;
      if (!lostData && Date.now() < this.nextRebuildAt) return;
      this.nextRebuildAt = Date.now() + jitter(this.opts.indexRebuildMs);
      const jobs = await readyJobs(this.opts.db, REBUILD_BATCH);
      await this.index(jobs);
      await redis.set(keys.indexMarker(), String(Date.now()));
      if (lostData) log.warn("ready index rebuilt from Postgres (Redis had lost its data)", { jobs: jobs.length });
    } catch {
      // Redis down: nothing to rebuild into; claimers are polling Postgres meanwhile.
    }
  }

  private index(jobs: Array<{ id: string; createdAt: Date; runAt?: Date | null }>): Promise<void> {
    return indexReady(this.opts.redis, this.opts.keys.readyIndex(), jobs);
  }
}
