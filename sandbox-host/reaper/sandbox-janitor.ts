/**
 * Sandboxes outlive their run when the host that made them dies and never comes back, or when
 * the end-of-run delete failed (the job row's cleanup fence then stays set). Every host runs this
 * janitor on a jittered interval: it lists every labelled sandbox on its Docker engine, asks
 * Postgres which of their runs are over (a known execution whose job no longer runs under it),
 * removes exactly those, whichever host's label they carry, and clears the jobs' cleanup fences.
 * A sandbox whose run Postgres does not know (another deployment on the same engine) or that is
 * still running anywhere is never touched.
 */
import type { Db } from "../../src/db/client";
import { clearCleanupFences, finishedExecutions } from "../../src/db/reaper-repo";
import { PeriodicTask } from "../lifecycle/periodic";
import type { Service } from "../lifecycle/service";
import { errorFields, type Logger } from "../log";
import type { SandboxManager } from "../sandbox/manager";

export interface SandboxJanitorOptions {
  db: Db;
  sandbox: Pick<SandboxManager, "removeFinished">;
  log: Logger;
  intervalMs: number;
}

export class SandboxJanitor implements Service {
  readonly name = "sandbox janitor";
  /** ~every intervalMs ±20%, fixed delay. */
  private readonly loop: PeriodicTask;

  constructor(private readonly opts: SandboxJanitorOptions) {
    this.loop = new PeriodicTask({ name: this.name, everyMs: opts.intervalMs, spread: 0.2 }, () => this.once());
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
