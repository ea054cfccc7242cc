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
import { jitter } from "../../src/domain/backoff";
import { errorFields, type Logger } from "../log";
import type { SandboxManager } from "../sandbox";

export interface SandboxJanitorOptions {
  db: Db;
  sandbox: Pick<SandboxManager, "removeFinished">;
  log: Logger;
  intervalMs: number;
}

export class SandboxJanitor {
  private timer: NodeJS.Timeout | null = null;
  private pass: Promise<void> | null = null;

  constructor(private readonly opts: SandboxJanitorOptions) {}

  start(): void {
    if (this.timer) return;
    const tick = () => {
      this.pass = this.once()
        .then(() => undefined)
        .finally(() => {
          this.pass = null;
          if (this.timer) this.timer = setTimeout(tick, jitter(this.opts.intervalMs, 0.2));
        });
    };
    this.timer = setTimeout(tick, jitter(this.opts.intervalMs, 0.2));
  }

  async stop(): Promise<void> {
    if (this.timer) clearTimeout(this.timer);
    this.timer = null;
    await this.pass;
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
