/**
 * An execution that continues a job from its journal (docs/architecture.md, "Recovery"): the
 * reaper found the last owner gone, or the owner handed the job off at shutdown, and re-queued
 * it. This execution is new (its own identity, its own events); it never re-runs the last one:
 *  - the conversation is rebuilt from the journal (journal.ts), so completed turns and tool
 *    results are not asked or called again;
 *  - a model turn that had not completed is asked again (`discarded_turn`);
 *  - a tool call in flight at the loss (a `call` row, no `result`) is never repeated unless its
 *    agent declares it idempotent (then it is made again with the same idempotency key); else
 *    the model gets `outcome_unknown`, or, when the call needs approval, a person is asked again;
 *  - the sandbox's workspace died with the host: the last journaled snapshot of it is restored
 *    (workspace.ts); only when there is none is the model told (`sandbox_reset`).
 */
import { FORK_REASON } from "../../src/contracts/fork";
import type { ModelToolCall } from "../model/types";
import { type Rebuilt, rebuildFromJournal } from "./journal";
import type { Execution } from "./run-context";

/** What readRow hands the loop when this execution recovers the job (or starts a fork from its copied prefix). */
export interface Recovery {
  reason: string;
  rebuilt: Rebuilt;
  /** Open calls that had started (in flight at the loss). */
  inFlight: ReadonlySet<string>;
  /**
   * Open calls the fork's source had started (their `call` row is at or before the fork point):
   * never made again by this job, whatever the agent declares; `outcome_unknown` is their result.
   */
  sourceCalls: ReadonlySet<string>;
  /** The job this one was forked from, when this execution is a fork's first (`run.forked`). */
  forkedFrom: { jobId: string; step: number } | null;
  /** The model must be told the sandbox is new: it had one, and no snapshot of it was journaled. */
  sandboxReset: boolean;
}

/** The error the model reads for a call in flight at the loss that is not made again. */
export const OUTCOME_UNKNOWN = {
  code: "outcome_unknown",
  message:
    "the host running this tool call was lost before its result was recorded; whether the call took effect is unknown, and it was not repeated",
} as const;

/** What a person deciding again on an approved call in flight at the loss is told (waiting_for.question). */
export const OUTCOME_UNKNOWN_NOTE =
  "This call was approved and started, but the host running it was lost before its result was recorded: whether it took effect is unknown. Approve to make it again, deny to tell the model it was not.";

/** The error the model reads in a fork for a call its source had in flight at the fork point (not made again). */
export const FORK_OUTCOME_UNKNOWN = {
  code: "outcome_unknown",
  message:
    "this job was forked from another job while this tool call was in flight there; whether the call took effect is unknown, and the fork does not make it again",
} as const;

/** The user message that tells a fork's model its sandbox is not the source's. */
export const FORK_SANDBOX_NOTE =
  "[runtime note] This run was forked from an earlier run. It has a new sandbox: files and processes from the earlier run's tool calls are not there.";

/** The user message that tells the model its sandbox was reset. */
export const SANDBOX_RESET_NOTE =
  "[runtime note] This run moved to a new host after its previous host was lost. The sandbox was reset: files and processes from earlier tool calls are gone.";

/**
 * Read the journal, write the `recovered` row (clearing the job's recovery reason, fenced), and
 * say what this execution continues from. Throws when the fence missed (the run then lost
 * ownership and stops): another execution has the job.
 */
export async function beginRecovery(exec: Execution, reason: string): Promise<Recovery> {
  const { deps, run, id, job } = exec;
  const records = await deps.journal.read(id.jobId);
  const rebuilt = rebuildFromJournal(records);
  const inFlight = new Set(rebuilt.open.filter((o) => o.started).map((o) => o.call.id));
  // A fork's copied prefix (docs/architecture.md, "Forks"): a call its source had started is the
  // source's side effect, so neither this execution nor a later recovery of the fork repeats it.
  const forkStep = job.forkedFromStep;
  const sourceCalls = new Set(
    forkStep === null
      ? []
      : records
          .filter((r) => r.kind === "call" && r.seq <= forkStep && inFlight.has(String(r.payload.call_id)))
          .map((r) => String(r.payload.call_id)),
  );
  const forkedFrom =
    reason === FORK_REASON && job.forkedFromJobId !== null && forkStep !== null
      ? { jobId: job.forkedFromJobId, step: forkStep }
      : null;
  const recovery: Recovery = {
    reason,
    rebuilt,
    inFlight,
    sourceCalls,
    forkedFrom,
    sandboxReset: rebuilt.hadSandbox && rebuilt.snapshot === null,
  };
  // The workspace of the step this execution continues from, unpacked before its first tool call.
  run.pendingRestore = rebuilt.snapshot;
  if (!(await deps.journal.recovered(id, recoveredPayload(recovery)))) {
    run.loseOwnership();
    throw new Error("the recovered job is no longer this execution's");
  }
  return recovery;
}

/** The `run.forked` event's payload: the source job and the step the fork continued after. */
export function forkedPayload(from: { jobId: string; step: number }): { from_job: string; from_step: number } {
  return { from_job: from.jobId, from_step: from.step };
}

/** The `run.recovered` event's payload (and the journal's `recovered` row; a fork's names its source too). */
export function recoveredPayload(r: Recovery): {
  reason: string;
  from_step: number;
  discarded_turn: boolean;
  unknown_calls: string[];
  sandbox_reset: boolean;
  from_job?: string;
} {
  return {
    ...(r.forkedFrom ? { from_job: r.forkedFrom.jobId } : {}),
    reason: r.reason,
    from_step: r.rebuilt.lastSeq,
    // With no open call the next step is a model turn: whatever turn the last execution was
    // streaming had not completed (a completed one is journaled before its calls) and is asked again.
    discarded_turn: r.rebuilt.open.length === 0,
    unknown_calls: [...r.inFlight],
    sandbox_reset: r.sandboxReset,
  };
}

/** The open calls of the last journaled turn, in order: what the recovering execution runs first. */
export function openCalls(r: Recovery): ModelToolCall[] {
  return r.rebuilt.open.map((o) => o.call);
}
