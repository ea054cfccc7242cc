/**
 * The host's scheduler: fires schedule ticks (src/db/schedules-repo.ts `fireDueSchedules`), on
 * every host, so a tick needs no particular host alive (with none, the Worker's cron backstop
 * fires it within a minute). Racing hosts make one job per tick: the repo's statement decides.
 *
 * It sleeps until the soonest tick ahead (Postgres' clock, so host clock skew does not matter),
 * never longer than `maxWaitMs` (HOST_SCHEDULE_MS), or HOST_IDLE_MS while the fleet is idle; a
 * schedule created or changed meanwhile wakes it at once (ear_schedule, drizzle/0016, through the
 * ready listener), so the cap only bounds a lost notification. A pass with nothing due is one
 * indexed statement.
 */
import type { Db } from "../../src/db/client";
import { fireDueSchedules } from "../../src/db/schedules-repo";
import type { AdmissionRules } from "../../src/domain/job-admission";
import type { FleetActivity } from "../lifecycle/activity";
import type { Service } from "../lifecycle/service";
import { TimedLoop } from "../lifecycle/timed-loop";
import { errorFields, type Logger } from "../log";

export interface ScheduleTickerOptions {
  db: Db;
  log: Logger;
  /** The longest sleep while the fleet is busy. */
  maxWaitMs: number;
  activity?: FleetActivity;
  /**
   * What each tick's job is admitted by: this host's models (MODEL_REGISTRY, with its per-model
   * tenant allow-lists: give hosts the gateway's registry) and MAX_QUEUED_JOBS_PER_TENANT.
   */
  admission: AdmissionRules;
}

export class ScheduleTicker implements Service {
  readonly name = "schedule ticker";
  private readonly loop: TimedLoop;

  constructor(private readonly opts: ScheduleTickerOptions) {
    const activity = opts.activity;
    this.loop = new TimedLoop(
      {
        name: this.name,
        busyMs: opts.maxWaitMs,
        idle: activity ? { everyMs: activity.idleMs, when: () => activity.idle } : undefined,
        onError: (err) => opts.log.warn("schedule pass failed", errorFields(err)),
      },
      () => this.pass(),
    );
  }

  start(): void {
    this.loop.start();
  }

  stop(): Promise<void> {
    return this.loop.stop();
  }

  /** A schedule was created or changed (ear_schedule): its first tick may be sooner than the sleep. */
  wake(): void {
    this.loop.wake();
  }

  private async pass(): Promise<number | null> {
    // Asleep (lifecycle/sleep.ts): the sleep ends by the next tick (the look read it) and wakes this loop.
    if (this.opts.activity?.asleep) return null;
    const outcome = await fireDueSchedules(this.opts.db, this.opts.admission, this.opts.log);
    for (const f of outcome.fired) {
      if (f.jobId && f.scheduledFor) {
        this.opts.log.info("schedule tick fired", {
          schedule_id: f.scheduleId,
          job_id: f.jobId,
          scheduled_for: f.scheduledFor.toISOString(),
        });
      }
    }
    return outcome.nextInMs;
  }
}
