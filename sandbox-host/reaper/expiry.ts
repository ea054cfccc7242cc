/**
 * The expiry sweep: queued jobs past their `ttl_s` end `expired` (src/db/admission-repo.ts
 * `expireOverdue`), on every host every HOST_REAP_MS (jittered ±30 %), the first sweep at start.
 * The Worker's cron runs the same sweep (workers/cron/expiry-backstop.ts) so that a fleet of zero
 * hosts still expires them; each statement locks its jobs SKIP LOCKED and re-checks them on the
 * row, so any number of sweeps expire each job once.
 *
 * While the fleet is idle (lifecycle/activity.ts) nothing waits anywhere, so there is nothing to
 * expire: the sweep is skipped, unless the reaper's last look failed (it then knows nothing).
 * Idleness ends when a look finds a waiting job, and that wakes this loop.
 */
import { expireOverdue } from "../../src/db/admission-repo";
import type { Db } from "../../src/db/client";
import type { FleetActivity } from "../lifecycle/activity";
import { PeriodicService } from "../lifecycle/periodic";
import { errorFields, type Logger } from "../log";

export interface ExpirySweepOptions {
  db: Db;
  log: Logger;
  /** HOST_REAP_MS: the same cadence as the reaper's pass. */
  intervalMs: number;
  activity?: FleetActivity;
}

export class ExpirySweep extends PeriodicService {
  constructor(private readonly opts: ExpirySweepOptions) {
    super(
      {
        name: "expiry",
        everyMs: opts.intervalMs,
        spread: 0.3,
        firstDelayMs: 0,
        onError: (err) => opts.log.warn("expiry sweep failed", errorFields(err)),
        activity: opts.activity,
      },
      () => this.sweep(),
    );
  }

  /** One sweep; safe to run concurrently with other hosts' sweeps and the cron's. */
  async sweep(): Promise<void> {
    if (this.opts.activity?.idleAndSure) return;
    try {
      const expired = await expireOverdue(this.opts.db);
      if (expired.length > 0) this.opts.log.info("expired jobs not started within their ttl_s", { jobs: expired });
    } catch (err) {
      this.opts.log.warn("expiry sweep failed", errorFields(err));
    }
  }
}
