/**
 * The host's scheduler: fires schedule ticks (src/db/schedules-repo.ts `fireDueSchedules`), on
 * every host, so a tick needs no particular host alive (with none, the Worker's cron backstop
 * fires it within a minute). Racing hosts make one job per tick: the repo's statement decides.
 *
 * It sleeps until the soonest tick ahead (Postgres' clock, so host clock skew does not matter),
 * but never longer than `maxWaitMs` (HOST_SCHEDULE_MS): a schedule created or changed meanwhile
 * with an earlier tick is seen within that. A pass with nothing due is one indexed statement.
 */
import type { Db } from "../../src/db/client";
import { fireDueSchedules } from "../../src/db/schedules-repo";
import type { Service } from "../lifecycle/service";
import { errorFields, type Logger } from "../log";

export interface ScheduleTickerOptions {
  db: Db;
  log: Logger;
  /** The longest sleep between passes. */
  maxWaitMs: number;
  /** Called for each job this host's passes made (tests, metrics). */
  onFired?: (t: { scheduleId: string; jobId: string; scheduledFor: Date }) => void;
}

export class ScheduleTicker implements Service {
  readonly name = "schedule ticker";
  private timer: NodeJS.Timeout | undefined;
  private inFlight: Promise<void> | null = null;
  private active = false;

  constructor(private readonly opts: ScheduleTickerOptions) {}

  start(): void {
    if (this.active) return;
    this.active = true;
    this.wait(0);
  }

  async stop(): Promise<void> {
    this.active = false;
    clearTimeout(this.timer);
    while (this.inFlight) await this.inFlight;
  }

  private wait(ms: number): void {
    if (!this.active) return;
    this.timer = setTimeout(() => {
      this.inFlight = this.pass().finally(() => {
        this.inFlight = null;
      });
    }, ms);
  }

  private async pass(): Promise<void> {
    let nextInMs: number | null = null;
    try {
      const outcome = await fireDueSchedules(this.opts.db, this.opts.log);
      nextInMs = outcome.nextInMs;
      for (const f of outcome.fired) {
        if (f.jobId && f.scheduledFor) {
          this.opts.log.info("schedule tick fired", {
            schedule_id: f.scheduleId,
            job_id: f.jobId,
            scheduled_for: f.scheduledFor.toISOString(),
          });
          this.opts.onFired?.({ scheduleId: f.scheduleId, jobId: f.jobId, scheduledFor: f.scheduledFor });
        }
      }
    } catch (err) {
      this.opts.log.warn("schedule pass failed", errorFields(err));
    }
    this.wait(Math.min(nextInMs ?? this.opts.maxWaitMs, this.opts.maxWaitMs));
  }
}
