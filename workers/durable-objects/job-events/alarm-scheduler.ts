/**
 * The object's one alarm (a Durable Object has a single alarm), shared by the concerns that need
 * a wake-up: the terminal check (terminal-agreement.ts) while the log has no terminal event, the
 * retention (retention.ts) once it has. The scheduler does not know their rules; it asks each
 * for its next deadline and keeps the alarm at the earliest. Only one of them ever has a deadline
 * at a time (the log is either finished or not), but asking both keeps the alarm's owner in one
 * place instead of in every caller.
 */

/** When a concern next needs the alarm. */
export interface Deadline {
  at: number;
  /**
   * true: the alarm is set to exactly `at`, replacing a sooner pending alarm (the retention's
   * countdown replaces a terminal check that has nothing left to do). false: a pending alarm
   * that is due sooner is kept, since the concern only needs a wake-up no later than `at`.
   */
  exact: boolean;
}

export interface AlarmConcern {
  /**
   * Its next deadline, or null when it needs no alarm now. `fromAlarm`: asked from the alarm
   * handler (the alarm that woke the object is no longer pending), so a backing-off cadence may
   * take its next step.
   */
  nextDeadline(fromAlarm: boolean): Deadline | null;
}

export class AlarmScheduler {
  /**
   * The pending alarm as this object last set it; undefined until read. Cached so the ingest
   * hot path costs no storage read: only this object sets its alarm.
   */
  private due: number | null | undefined;

  constructor(
    private readonly storage: DurableObjectStorage,
    private readonly concerns: readonly AlarmConcern[],
  ) {}

  /** Keep one alarm pending at the earliest deadline any concern has (never later than due). */
  async reschedule(fromAlarm = false): Promise<void> {
    let next: Deadline | null = null;
    for (const concern of this.concerns) {
      const deadline = concern.nextDeadline(fromAlarm);
      if (deadline !== null && (next === null || deadline.at < next.at)) next = deadline;
    }
    if (fromAlarm) this.due = null;
    if (next === null) return;
    if (!next.exact) {
      if (this.due === undefined) this.due = await this.storage.getAlarm();
      if (this.due !== null && this.due >= Date.now() && this.due <= next.at) return;
    }
    await this.storage.setAlarm(next.at);
    this.due = next.at;
  }

  /** The storage, alarm included, was deleted (retention): nothing is pending any more. */
  forget(): void {
    this.due = null;
  }
}
