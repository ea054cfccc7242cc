/**
 * The ready-index rebuild: every HOST_INDEX_REBUILD_MS (jittered) the host re-adds every
 * claimable job to the ready index from Postgres, and at once when Redis lost its data. Each
 * check (every HOST_REAP_MS, ±30 %, the first at start) reads a marker key the rebuild sets:
 * FLUSHALL or a restart without persistence removes it. Hosts only: the index is an accelerator
 * hosts keep for themselves, so the Worker's cron has no counterpart (workers/cron/reaper-backstop.ts
 * says why). With Redis down there is nothing to rebuild into; claimers poll Postgres meanwhile.
 *
 * While the fleet is idle (lifecycle/activity.ts) nothing waits anywhere, so there is nothing to
 * index and no Redis command is sent: the check is skipped, unless the reaper's last look failed
 * (it then knows nothing). Idleness ends when a look finds a waiting job, and that wakes this loop.
 */
import type { Db } from "../../src/db/client";
import { readyJobs } from "../../src/db/reaper-repo";
import { jitter } from "../../src/domain/backoff";
import type { RedisKeys } from "../../src/quota/keys";
import { indexReady } from "../../src/quota/ready-index";
import type { Redis } from "../../src/quota/redis";
import type { FleetActivity } from "../lifecycle/activity";
import { PeriodicService } from "../lifecycle/periodic";
import { errorFields, type Logger } from "../log";

export interface IndexRebuildOptions {
  db: Db;
  redis: Redis;
  keys: RedisKeys;
  log: Logger;
  /** How often the marker is checked (HOST_REAP_MS). */
  checkMs: number;
  /** How often the index is rebuilt with the marker present (HOST_INDEX_REBUILD_MS). */
  rebuildMs: number;
  activity?: FleetActivity;
}

/** Claimable jobs re-indexed per rebuild. */
const REBUILD_BATCH = 1000;

export class IndexRebuild extends PeriodicService {
  private nextRebuildAt = 0;

  constructor(private readonly opts: IndexRebuildOptions) {
    super(
      {
        name: "index-rebuild",
        everyMs: opts.checkMs,
        spread: 0.3,
        firstDelayMs: 0,
        onError: (err) => opts.log.warn("ready index rebuild failed", errorFields(err)),
        activity: opts.activity,
      },
      () => this.check(),
    );
  }

  /** One check of the marker, and the rebuild when it is due or the marker is gone. */
  async check(): Promise<void> {
    if (this.opts.activity?.idleAndSure) return;
    const { redis, keys, log } = this.opts;
    try {
      const marker = await redis.get(keys.indexMarker());
      const lostData = marker === null;
      if (!lostData && Date.now() < this.nextRebuildAt) return;
      this.nextRebuildAt = Date.now() + jitter(this.opts.rebuildMs);
      const jobs = await readyJobs(this.opts.db, REBUILD_BATCH);
      await indexReady(redis, keys.readyIndex(), jobs);
      await redis.set(keys.indexMarker(), String(Date.now()));
      if (lostData) log.warn("ready index rebuilt from Postgres (Redis had lost its data)", { jobs: jobs.length });
    } catch {
      // Redis down: nothing to rebuild into; claimers are polling Postgres meanwhile.
    }
  }
}
