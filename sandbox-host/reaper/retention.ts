/**
 * The retention purge: finished jobs older than JOB_RETENTION_S are deleted with their
 * executions and inputs, leaving tombstones (src/db/retention-repo.ts), every HOST_PURGE_MS
 * (jittered ±20 %; slower than the reaper: retention is days, not seconds), the first purge at
 * start. The Worker's cron runs the same purge (workers/cron/retention-backstop.ts); each batch
 * locks its jobs SKIP LOCKED, so any number of purges delete each job once.
 *
 * It runs while the fleet is idle too (finished jobs age whether or not anything runs), but not
 * more often than HOST_IDLE_MS then: with the look, it is one of an idle host's two statements.
 */
import type { Db } from "../../src/db/client";
import { purgeFinishedJobs } from "../../src/db/retention-repo";
import type { FleetActivity } from "../lifecycle/activity";
import { PeriodicService } from "../lifecycle/periodic";
import { errorFields, type Logger } from "../log";

export interface RetentionPurgeOptions {
  db: Db;
  log: Logger;
  /** HOST_PURGE_MS (> 0; 0 means the host builds no purge at all). */
  purgeMs: number;
  /** Finished jobs older than this are purged. */
  jobRetentionMs: number;
  activity?: FleetActivity;
}

export class RetentionPurge extends PeriodicService {
  constructor(private readonly opts: RetentionPurgeOptions) {
    super(
      {
        name: "retention",
        everyMs: opts.purgeMs,
        spread: 0.2,
        firstDelayMs: 0,
        onError: (err) => opts.log.warn("retention purge failed", errorFields(err)),
        activity: opts.activity,
        idleAtLeastBusy: true,
      },
      () => this.purge(),
    );
  }

  /** One bounded purge (the repo's batch size × batch count). */
  async purge(): Promise<void> {
    // Asleep: the look before the sleep read when the oldest finished job is due; it wakes the host then.
    if (this.opts.activity?.asleep) return;
    const { db, log, jobRetentionMs } = this.opts;
    try {
      const { purged, batches } = await purgeFinishedJobs(db, { olderThanMs: jobRetentionMs });
      if (purged > 0) log.info("purged finished jobs past their retention", { purged, batches });
    } catch (err) {
      log.warn("retention purge failed", errorFields(err));
    }
  }
}
