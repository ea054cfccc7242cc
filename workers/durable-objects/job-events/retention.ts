/**
 * Retention: once the log has its terminal event it is kept JOB_EVENTS_RETENTION_S, then the
 * object deletes all its storage (docs/events.md, "Retention"). The due time is kept in `meta`
 * (object-meta.ts) so a terminal-check alarm already in flight, or an object finished before
 * retention existed, cannot delete early: the alarm re-arms until the stored time has passed.
 * Its deadline is the one alarm's (alarm-scheduler.ts) once the log is finished.
 *
 * The gateway answers 410 `events_expired` for such a job from the row's finished_at without
 * asking the object, since an emptied object cannot tell "expired" from "no events yet".
 */
import { log } from "../../log";
import type { AlarmConcern, Deadline } from "./alarm-scheduler";
import type { EventLog } from "./event-log";
import type { ObjectMeta } from "./object-meta";

export class Retention implements AlarmConcern {
  private deleted = false;

  /** @param retentionMs how long the log outlives its terminal event (injectable for tests). */
  constructor(
    private readonly storage: DurableObjectStorage,
    private readonly meta: ObjectMeta,
    private readonly log: EventLog,
    public retentionMs: number,
  ) {}

  /**
   * Set once this instance deleted its storage: from then on nothing may touch SQLite (its tables
   * are gone, and any write would recreate the storage the retention just freed).
   */
  get expired(): boolean {
    return this.deleted;
  }

  /** The log just got its terminal event: the countdown starts now. */
  arm(): void {
    this.meta.setExpiresAt(Date.now() + this.retentionMs);
  }

  /** The stored due time, exactly, once the log is finished: it replaces a pending terminal check. */
  nextDeadline(): Deadline | null {
    if (this.deleted || !this.log.finished) return null;
    const at = this.meta.expiresAt();
    return at === null ? null : { at, exact: true };
  }

  /**
   * On the alarm of a finished log: delete everything once the retention has passed (true), else
   * leave the log (false; a log finished before retention existed is armed now) for the scheduler
   * to re-arm.
   */
  async expireIfDue(): Promise<boolean> {
    const due = this.meta.expiresAt();
    if (due === null) {
      this.arm();
      return false;
    }
    if (Date.now() < due) return false;
    this.deleted = true;
    await this.storage.deleteAlarm();
    await this.storage.deleteAll();
    log.info("event log deleted after its retention", { jobId: this.meta.knownJobId });
    return true;
  }
}
