/**
 * The host's reaper: runs the recovery pass (src/db/recovery-pass.ts: idempotent CAS SQL) on a
 * jittered interval on every host, so recovery never depends on one particular host being alive
 * (with no host alive at all, the Worker's cron backstop, workers/cron/reaper-backstop.ts, runs
 * the same pass every minute). Each pass releases stale claims, ends waits past their deadline,
 * and marks silent runs `lost` and overdue runs `timed_out` (or re-queues them for recovery),
 * re-indexing what it re-queued.
 *
 * The host's other upkeep duties are services of their own, each named like its cron backstop
 * (workers/cron/*-backstop.ts): the expiry sweep (expiry.ts), the retention purge
 * (retention.ts), and the ready-index rebuild (index-rebuild.ts, hosts only).
 *
 * The reaper also owns the host's look at the fleet's work (lifecycle/activity.ts). While the
 * fleet is idle a pass runs every HOST_IDLE_MS instead and starts with that look: the reaping
 * statements only touch claimed or running jobs (or waits about to expire), so with none of them
 * anywhere they are skipped. A look that finds work runs them in the same pass and ends idleness,
 * which wakes the other duties. A host without runs in a busy fleet also looks now and then, to
 * learn when it is over, and so does a host with runs when nothing happened for a while: the
 * fleet's only work may be its own held runs (an owner's quiet, lifecycle/activity.ts).
 */
import type { Db } from "../../src/db/client";
import { fleetWork } from "../../src/db/reaper-repo";
import { type ReapedRun, recoveryPass } from "../../src/db/recovery-pass";
import type { RedisKeys } from "../../src/quota/keys";
import { indexReady } from "../../src/quota/ready-index";
import type { Redis } from "../../src/quota/redis";
import type { FleetActivity, FleetWork } from "../lifecycle/activity";
import { MAX_WATCHED_OWNERS } from "../lifecycle/held-watch";
import { PeriodicService } from "../lifecycle/periodic";
import { errorFields, type Logger } from "../log";

export interface ReaperOptions {
  db: Db;
  redis: Redis;
  keys: RedisKeys;
  log: Logger;
  intervalMs: number;
  claimTimeoutMs: number;
  runLostAfterMs: number;
  /** Whether the fleet is idle; without it every pass is a busy one. */
  activity?: FleetActivity;
  /** This host's id: the look tells runs held elsewhere from its own (lifecycle/activity.ts, an owner's quiet). */
  hostId?: string;
  /** JOB_RETENTION_S in ms when this host purges: the look then reads when the next purge is due. */
  retentionMs?: number;
  /** Called for each run this pass declared lost, timed out or recovered. */
  onReaped?: (r: ReapedRun) => void;
}

export class Reaper extends PeriodicService {
  constructor(private readonly opts: ReaperOptions) {
    // The first pass runs at once (a host starting after a crash recovers its jobs first), then ~every intervalMs ±30%.
    super(
      {
        name: "reaper",
        everyMs: opts.intervalMs,
        spread: 0.3,
        firstDelayMs: 0,
        onError: (err) => opts.log.warn("reaper pass failed", errorFields(err)),
        activity: opts.activity,
      },
      () => this.pass(),
    );
  }

  /** One reaping pass; safe to run concurrently with other hosts' passes. */
  async pass(): Promise<void> {
    const activity = this.opts.activity;
    // Asleep (lifecycle/sleep.ts): the look before the sleep found nothing to reap before its deadline.
    if (activity?.asleep) return;
    if (activity?.idle) {
      const work = await this.look(activity);
      // A failed look knows nothing: the pass runs in full. This host's own runs are not its
      // reaper's to watch (they are alive while it is): only another host's are, unless their
      // owners are watched (lifecycle/held-watch.ts OwnersWatch: an owner's end ends the quiet).
      const elsewhere = work?.running === true && work.runningElsewhere !== false && !activity.ownersWatched;
      if (work === null || work.claimed || elsewhere || work.expiring) {
        await this.reap();
      }
      return;
    }
    await this.reap();
    if (activity?.shouldLook()) await this.look(activity);
  }

  private async look(activity: FleetActivity): Promise<FleetWork | null> {
    const startedAt = activity.lookStarting();
    try {
      // The next look may come 1.3 × HOST_IDLE_MS from now (its jitter): a deadline before then is work.
      const work = await fleetWork(this.opts.db, {
        deadlineHorizonMs: activity.idleMs * 1.3,
        retentionMs: this.opts.retentionMs ?? null,
        hostId: this.opts.hostId ?? null,
        ownersAsked: MAX_WATCHED_OWNERS,
      });
      await activity.looked(work, startedAt);
      return work;
    } catch (err) {
      activity.lookFailed();
      this.opts.log.warn("fleet work look failed", errorFields(err));
      return null;
    }
  }

  private async reap(): Promise<void> {
    const { db, log, claimTimeoutMs, runLostAfterMs, redis, keys } = this.opts;
    try {
      const { reaped } = await recoveryPass({
        db,
        log,
        limits: { claimTimeoutMs, runLostAfterMs },
        reindex: (jobs) => indexReady(redis, keys.readyIndex(), jobs),
      });
      for (const r of reaped) this.opts.onReaped?.(r);
    } catch (err) {
      log.warn("reaper pass failed", errorFields(err));
    }
  }
}
