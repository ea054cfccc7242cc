/**
 * Terminal agreement: the log's one terminal event agrees with the job row in Postgres, both ways.
 *
 * - A host's terminal event is appended only if the row agrees with it (one Postgres read per job
 *   end): a host writes its terminal state before it emits the event, so an honest one always
 *   finds its row terminal already (docs/events.md, "Terminal events agree with the row").
 * - No stream waits forever: while the log has no terminal event, the alarm reads the row and,
 *   when the job is terminal there (lost, timed out, cancelled before it started, or a host that
 *   died after writing its terminal state), appends the matching terminal event itself, after the
 *   first events of executions that delivered none (first-events.ts).
 *
 * Its cadence is its deadline for the one alarm (alarm-scheduler.ts): every second while an SSE
 * client watches, every 5 s while only chat sessions do, otherwise backing off from 10 s to
 * 5 min; one indexed row read per alarm, none while a host is delivering. It owns no table.
 */
import type { EventEnvelope } from "../../../src/contracts/events";
import { log } from "../../log";
import type { IngestRefusal } from "../rpc";
import type { AlarmConcern, Deadline } from "./alarm-scheduler";
import type { EventLog, LoggedEvent } from "./event-log";
import type { FirstEventProjection } from "./first-events";
import { type JobStateLookup, projectedTerminal, terminalDisagreement } from "./postgres-facts";

export const TERMINAL_CHECK = {
  /** An SSE client is waiting on this job. */
  watchedMs: 1_000,
  /** Only chat sessions are relaying this job. */
  relayedMs: 5_000,
  /** Nobody watches: first check, then doubling up to the cap. */
  idleFirstMs: 10_000,
  idleMaxMs: 5 * 60_000,
  /**
   * A host delivered events this recently: it is alive and will send the terminal event itself,
   * so the alarm skips its Postgres read. Only a stream that went quiet (host dead, job ended
   * without events, a slow model turn) costs a read, so 100 watched running jobs do not mean
   * 100 Postgres reads a second.
   */
  liveHostQuietMs: 3_000,
} as const;

/** Who watches the job right now: the cadence follows them. */
export interface Watchers {
  sse: number;
  chat: number;
}

/** What one terminal check of the row found. */
export type RowCheck =
  /** Postgres has no such job: nothing will ever arrive for it, so nothing is scheduled again. */
  | { kind: "no_job" }
  /** Not terminal yet (or not readable, or a live host owns the end): check again later. */
  | { kind: "pending" }
  /** The row was terminal: these events (first events, then the terminal one) were appended. */
  | { kind: "projected"; events: LoggedEvent[] };

export class TerminalAgreement implements AlarmConcern {
  /** Injectable for tests: see TERMINAL_CHECK.liveHostQuietMs. */
  liveHostQuietMs: number = TERMINAL_CHECK.liveHostQuietMs;
  private idleDelayMs: number = TERMINAL_CHECK.idleFirstMs;
  /** When a host last delivered new events (memory only: after an eviction the alarm just reads). */
  private lastHostEventAt = 0;

  /** @param jobState reads the job row; injectable (tests set `JobEventsObject.terminal.jobState`). */
  constructor(
    private readonly log: EventLog,
    private readonly firsts: FirstEventProjection,
    private readonly watchers: () => Watchers,
    public jobState: JobStateLookup,
  ) {}

  /** A host just delivered new events: it is alive. */
  hostDelivered(): void {
    this.lastHostEventAt = Date.now();
  }

  /** The log has its terminal event: the idle back-off starts over. */
  logFinished(): void {
    this.idleDelayMs = TERMINAL_CHECK.idleFirstMs;
  }

  /**
   * A host's terminal event is appended only if the job row agrees. Returns the refusal
   * (`terminal_disagrees`, or `unavailable` when the row cannot be read), or null when it agrees.
   */
  async hostTerminal(jobId: string, event: EventEnvelope): Promise<IngestRefusal | null> {
    let reason: string | null;
    try {
      reason = terminalDisagreement(event, await this.jobState(jobId));
    } catch (err) {
      log.warn("job row lookup for a terminal event failed", { jobId, error: err });
      return { ok: false, reason: "unavailable", message: "cannot check the job row in Postgres" };
    }
    if (reason === null) return null;
    return { ok: false, reason: "terminal_disagrees", message: `${event.type} refused: ${reason}` };
  }

  /** The terminal check: Postgres says terminal and the log does not → append it ourselves. */
  async checkRow(jobId: string): Promise<RowCheck> {
    if (Date.now() - this.lastHostEventAt < this.liveHostQuietMs) return { kind: "pending" };
    try {
      const facts = await this.jobState(jobId);
      if (facts === null) return { kind: "no_job" };
      const delivered = facts.executionId ? this.log.deliveredThrough(facts.executionId) : 0;
      const terminal = projectedTerminal(jobId, facts, Date.now(), delivered);
      if (terminal && !this.log.finished) {
        // A host that died right after its started CAS (or its recovery's journal write) took its
        // first event with it: Postgres still says the execution ran, so the stream says so too,
        // before the terminal event.
        const firsts = await this.firsts.beforeTerminal(jobId, facts);
        const logged = this.log.finished ? null : this.log.appendProjectedTerminal(terminal, firsts);
        if (logged) {
          log.info("projected events from Postgres", { jobId, types: logged.map((e) => e.type) });
          return { kind: "projected", events: logged };
        }
      }
    } catch (err) {
      log.warn("terminal check failed; will retry", { jobId, error: err });
    }
    return { kind: "pending" };
  }

  /** The next check at the cadence the current watchers need; none once the log is finished. */
  nextDeadline(fromAlarm: boolean): Deadline | null {
    if (this.log.finished) return null;
    const watchers = this.watchers();
    let delay: number;
    if (watchers.sse > 0) delay = TERMINAL_CHECK.watchedMs;
    else if (watchers.chat > 0) delay = TERMINAL_CHECK.relayedMs;
    else {
      delay = this.idleDelayMs;
      if (fromAlarm) this.idleDelayMs = Math.min(this.idleDelayMs * 2, TERMINAL_CHECK.idleMaxMs);
    }
    return { at: Date.now() + delay, exact: false };
  }
}
