/** The job state machine as small predicates (drawn, with who makes each transition, in docs/architecture.md). */
import type { JobState } from "../contracts/job";

export const FINAL_STATES: readonly JobState[] = ["completed", "failed", "cancelled", "lost", "timed_out"];

export function isFinalState(state: JobState): boolean {
  return FINAL_STATES.includes(state);
}

/** Which terminal event type announces a final state. */
export function terminalEventFor(state: JobState): `run.${string}` | null {
  return isFinalState(state) ? `run.${state}` : null;
}
