/**
 * Sandboxes outlive their run when the host that made them dies and never comes back, or when
 * the end-of-run delete failed (the job row's cleanup fence then stays set). Every host runs this
 * janitor on a jittered interval: it lists every labelled sandbox on its Docker engine, asks
 * Postgres which of their runs are over (a known execution whose job no longer runs under it),
 * removes exactly those, whichever host's label they carry, and clears the jobs' cleanup fences.
 * A sandbox whose run Postgres does not know (another deployment on the same engine) or that is
 * still running anywhere is never touched.
 *
 * Every pass converges: a fence is cleared by the pass that removed the sandbox, or, when that
 * clear could not happen (the statement failed, or the run was still `running` because the host
 * removed its previous process's sandboxes at start, before the reaper declared the run lost),
 * by a later pass. Such runs are kept (in memory) until Postgres confirms their fence is clear:
 * once a sandbox is gone no listing finds it again, so nothing else would ever clear the fence,
 * and a fenced job is never purged (retention keeps it for ever).
 *
 * While the fleet is idle (lifecycle/activity.ts) the pass runs every HOST_IDLE_MS instead: the
 * Docker listing costs nothing billed, but each pass that finds labelled sandboxes asks Postgres
 * about them, and sandboxes it may not remove (another deployment's) are found on every pass
 * (measured on a shared engine: 0.0125 statements/s per idle host at 30 s).
 */
import type { Db } from "../../src/db/client";
import { clearCleanupFences, finishedExecutions } from "../../src/db/reaper-repo";
import type { FleetActivity } from "../lifecycle/activity";
import { PeriodicService } from "../lifecycle/periodic";
import { errorFields, type Logger } from "../log";
import type { SandboxManager } from "../sandbox/manager";

export interface SandboxJanitorOptions {
  db: Db;
  sandbox: Pick<SandboxManager, "removeFinished" | "listAll">;
  log: Logger;
  intervalMs: number;
  /** Whether the fleet is idle; without it every pass keeps `intervalMs`. */
  activity?: FleetActivity;
}

export class SandboxJanitor extends PeriodicService {
  constructor(private readonly opts: SandboxJanitorOptions) {
    // ~every intervalMs ±20%, fixed delay.
    super(
      {
        name: "sandbox janitor",
        everyMs: opts.intervalMs,
        spread: 0.2,
        activity: opts.activity,
        idleAtLeastBusy: true,
      },
      () => this.once(),
    );
  }

  /**
   * Runs whose sandboxes are gone but whose fences are not yet known to be clear (see above).
   * Bounded by the sandboxes this host removed whose clear did not land yet.
   */
  private readonly unsettled = new Set<string>();

  /**
   * Runs whose removal failed. Their objects usually stay and the next pass removes them again,
   * but a removal that failed because another host removed the same objects at the same moment
   * (two janitors on one engine, or the owner's own end of run) leaves nothing to list: such a
   * run is owed its fence clear once a listing no longer finds it.
   */
  private readonly failed = new Set<string>();

  /** These runs' sandboxes are gone (removed at host start): clear their fences once they are over. */
  settle(runIds: Iterable<string>): void {
    for (const id of runIds) this.unsettled.add(id);
  }

  /** Runs whose fence clear is still owed (for tests and the log). */
  owed(): string[] {
    return [...this.unsettled];
  }

  /** One pass; returns the runs whose sandboxes were removed. Never throws. */
  async once(): Promise<string[]> {
    // Asleep (lifecycle/sleep.ts): no statement; a sandbox left behind waits for the next wake-up.
    if (this.opts.activity?.asleep) return [];
    let runs: string[] = [];
    try {
      if (this.failed.size > 0) {
        // A Docker listing costs nothing billed, and only follows a failed removal.
        const present = new Set((await this.opts.sandbox.listAll()).map((x) => x.run));
        for (const run of this.failed) {
          if (!present.has(run)) this.settle([run]);
        }
        this.failed.clear();
      }
      const removed = await this.opts.sandbox.removeFinished((ids) => finishedExecutions(this.opts.db, ids));
      runs = removed.runs;
      for (const { run, error } of removed.failed) {
        this.failed.add(run);
        this.opts.log.warn("sandbox janitor removal failed", { run_id: run, ...errorFields(error) });
      }
    } catch (err) {
      this.opts.log.warn("sandbox janitor pass failed", errorFields(err));
    }
    // Whatever went wrong above, the runs whose sandboxes are gone get their fences cleared.
    this.settle(runs);
    if (this.unsettled.size > 0) {
      try {
        const asked = [...this.unsettled];
        const { running } = await clearCleanupFences(this.opts.db, asked);
        for (const id of asked) this.unsettled.delete(id);
        this.settle(running);
      } catch (err) {
        this.opts.log.warn("sandbox janitor fence clear failed", { runs: this.unsettled.size, ...errorFields(err) });
      }
    }
    return runs;
  }
}
