/**
 * Sandboxes outlive their run when the host that made them dies and never comes back, or when
 * the end-of-run delete failed (the job row's cleanup fence then stays set). Every host runs this
 * janitor on a jittered interval: it lists every labelled sandbox on its Docker engine, asks
 * Postgres which of their runs are over (a known execution whose job no longer runs under it),
 * removes exactly those, whichever host's label they carry, and clears the jobs' cleanup fences.
 * A sandbox whose run Postgres does not know (another deployment on the same engine) or that is
 * still running anywhere is never touched.
 *
 * While the fleet is idle (lifecycle/activity.ts) the pass runs every HOST_IDLE_MS instead: the
 * Docker listing costs nothing billed, but each pass that finds labelled sandboxes asks Postgres
 * about them, and sandboxes it may not remove (another deployment's) are found on every pass
 * (measured on a shared engine: 0.0125 statements/s per idle host at 30 s).
 */
import type { Db } from "../../src/db/client";
import { clearCleanupFences, finishedExecutions } from "../../src/db/reaper-repo";
import type { FleetActivity } from "../lifecycle/activity";
import { PeriodicTask } from "../lifecycle/periodic";
import type { Service } from "../lifecycle/service";
import { errorFields, type Logger } from "../log";
import type { SandboxManager } from "../sandbox/manager";

export interface SandboxJanitorOptions {
  db: Db;
  sandbox: Pick<SandboxManager, "removeFinished">;
  log: Logger;
  intervalMs: number;
  /** Whether the fleet is idle; without it every pass keeps `intervalMs`. */
  activity?: FleetActivity;
}

export class SandboxJanitor implements Service {
  readonly name = "sandbox janitor";
  /** ~every intervalMs ±20%, fixed delay. */
  private readonly loop: PeriodicTask;

  constructor(private readonly opts: SandboxJanitorOptions) {
    const activity = opts.activity;
    this.loop = new PeriodicTask(
      {
        name: this.name,
        everyMs: opts.intervalMs,
        spread: 0.2,
        idle: activity ? { everyMs: Math.max(opts.intervalMs, activity.idleMs), when: () => activity.idle } : undefined,
      },
      () => this.once(),
    );
    activity?.onWork(() => this.loop.hurry());
  }

  start(): void {
    this.loop.start();
  }

  stop(): Promise<void> {
    return this.loop.stop();
  }

  /** One pass; returns the runs whose sandboxes were removed. Never throws. */
  async once(): Promise<string[]> {
    try {
      const { runs } = await this.opts.sandbox.removeFinished((ids) => finishedExecutions(this.opts.db, ids));
      if (runs.length > 0) await clearCleanupFences(this.opts.db, runs);
      return runs;
    } catch (err) {
      this.opts.log.warn("sandbox janitor pass failed", errorFields(err));
      return [];
    }
  }
}
