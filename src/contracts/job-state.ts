/**
 * The job states, which of them are terminal, and the event that announces each terminal state:
 * the one home of these facts (the state machine itself is drawn in docs/architecture.md). The
 * SQL that must list states too (the `jobs_state_ck` check is built from JOB_STATES in
 * src/db/schema.ts; the terminal list of the `ear_settle_inputs` trigger in
 * drizzle/0003_settle_inputs.sql) is compared with these lists by test/unit/job-state.test.ts.
 */
import type { TerminalEventType } from "./events";

/**
 * `waiting`: the run suspended at a tool call that needs a person (an approval, or an answer to
 * ask_user). No host holds it: no owner, no execution, no slot, no lease; a decision puts it back
 * to `queued` and the next execution resumes from its checkpoint.
 */
export const JOB_STATES = [
  "queued",
  "running",
  "waiting",
  "completed",
  "failed",
  "cancelled",
  "lost",
  "timed_out",
  "expired",
] as const;
export type JobState = (typeof JOB_STATES)[number];

/** No statement moves a job out of these. */
export type FinalState = Exclude<JobState, "queued" | "running" | "waiting">;

/**
 * Which terminal event announces each final state: the one table of final states (the Record
 * type makes it name every one, and FINAL_STATES is read from its keys).
 */
export const TERMINAL_EVENT_OF: Readonly<Record<FinalState, TerminalEventType>> = {
  completed: "run.completed",
  failed: "run.failed",
  cancelled: "run.cancelled",
  lost: "run.lost",
  timed_out: "run.timed_out",
  /** Never started: not claimed within its `ttl_s` of becoming runnable (src/db/admission-repo.ts). */
  expired: "run.expired",
};

export const FINAL_STATES = Object.keys(TERMINAL_EVENT_OF) as readonly FinalState[];

export function isFinalState(state: string): state is FinalState {
  return Object.hasOwn(TERMINAL_EVENT_OF, state);
}

/** The terminal event type announcing `state`, or null for a state that is not final. */
export function terminalEventFor(state: string): TerminalEventType | null {
  return isFinalState(state) ? TERMINAL_EVENT_OF[state] : null;
}

/** The final state a terminal event announces, or null for any other event type. */
export function stateOfTerminalEvent(type: string): FinalState | null {
  return FINAL_STATES.find((s) => TERMINAL_EVENT_OF[s] === type) ?? null;
}
