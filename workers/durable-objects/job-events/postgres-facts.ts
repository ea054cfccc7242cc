/**
 * What the projector asks Postgres when a job's stream has no terminal event yet, and what it
 * makes of the answers. The queries live in src/db (projector-repo.ts, and journal-repo.ts for
 * the execution history); this file binds them to the gateway's database handle as injectable
 * lookups (the parts' TerminalAgreement.jobState, IngestTrust.lookup, FirstEventProjection.history),
 * so workerd tests can answer for Postgres, and turns the facts into the events the projector writes. The default
 * lookups read through the gateway's deps (deps.ts), so the terminal-check alarm shares the
 * per-isolate drizzle handle instead of building one per check.
 */
import {
  capEventPayload,
  type EventEnvelope,
  type EventPayload,
  type ProjectedPayload,
} from "../../../src/contracts/events";
import { terminalEventFor } from "../../../src/contracts/job-state";
import { type ExecutionHistoryEntry, executionHistory } from "../../../src/db/journal-repo";
import { type ExecutionFacts, executionFacts, type JobStateFacts, jobStateFacts } from "../../../src/db/projector-repo";
import { isUuid } from "../../../src/domain/uuid";
import { createDeps } from "../../deps";
import type { Env } from "../../env";
import { loadConfig } from "../../gateway-config";

/** The job row and one execution as the projector reads them (their home: src/db/projector-repo.ts). */
export type { ExecutionFacts, JobStateFacts };

export type JobStateLookup = (jobId: string) => Promise<JobStateFacts | null>;

/** The execution row `executionId` of job `jobId`, or null when that job has no such execution. */
export type ExecutionLookup = (jobId: string, executionId: string) => Promise<ExecutionFacts | null>;

/** One execution of a job as the projector reads it (its home: src/db/journal-repo.ts). */
export type { ExecutionHistoryEntry };

/** Every execution of the job, by epoch (one indexed read). */
export type ExecutionHistoryLookup = (jobId: string) => Promise<ExecutionHistoryEntry[]>;

/** Looked up per call, not kept: the settings (and so the handle) can change under a live object. */
const gatewayDb = (env: Env) => createDeps(loadConfig(env)).db();

// A non-UUID names nothing (and would fail Postgres' cast): no query.

export function postgresExecutionLookup(env: Env): ExecutionLookup {
  return async (jobId, executionId) =>
    isUuid(jobId) && isUuid(executionId) ? executionFacts(gatewayDb(env), jobId, executionId) : null;
}

export function postgresExecutionHistory(env: Env): ExecutionHistoryLookup {
  return async (jobId) => (isUuid(jobId) ? executionHistory(gatewayDb(env), jobId) : []);
}

export function postgresJobStateLookup(env: Env): JobStateLookup {
  return async (jobId) => (isUuid(jobId) ? jobStateFacts(gatewayDb(env), jobId) : null);
}

/**
 * The seq of a projected terminal event. Host seqs count from 1 per execution and never come near
 * 2^53 - 1, so (execution_id, seq) cannot collide with a host event of the same execution.
 */
export const PROJECTED_TERMINAL_SEQ = Number.MAX_SAFE_INTEGER;
/** The seq of a projected `run.started`: next to the terminal's, equally out of any host's reach. */
export const PROJECTED_STARTED_SEQ = Number.MAX_SAFE_INTEGER - 1;
/** The seq of a projected `run.recovered`: equally out of any host's reach. */
export const PROJECTED_RECOVERED_SEQ = Number.MAX_SAFE_INTEGER - 2;
/** execution_id of a projected terminal event for a job that never started. */
export const PROJECTOR_EXECUTION_ID = "projector";

/**
 * How long after `finished_at` a host-written terminal state (completed/failed/cancelled of a
 * started run) is left for the host's own terminal event: the host writes Postgres first and its
 * outbox delivers within milliseconds, so only a host that died in between is still missing it
 * after 5 s. `lost`, `timed_out` by the reaper and a cancel before start have no host to wait for.
 */
export const HOST_TERMINAL_GRACE_MS = 5_000;
/**
 * How long after `finished_at` the projector waits while the log is still behind the seq the host
 * said it had emitted when it wrote the terminal state (`executions.events_through`): that host's
 * outbox is delivering a backlog, and ending the stream from the row now would cut off the text
 * still on its way (at 100 concurrent runs on a loaded 2-core machine, host emit → client took up
 * to 3.5 s, and streams ended `run.completed` with deltas missing under the 5 s grace alone). Only
 * a host that died with events undelivered is still behind after this; those events are gone.
 */
export const HOST_BACKLOG_GRACE_MS = 120_000;

/** The terminal event the projector writes for `facts`, or null if it should not (yet). */
export function projectedTerminal(
  jobId: string,
  facts: JobStateFacts,
  now = Date.now(),
  /** The log's highest contiguous seq of `facts.executionId` (EventLog.deliveredThrough). */
  deliveredThrough = 0,
): EventEnvelope | null {
  const type = terminalEventFor(facts.state);
  if (!type) return null;
  // Not while the run's sandbox is still being removed (by its host, or the janitor for a lost
  // run): a stream never says a run is over before its cleanup is.
  if (facts.cleanupPending === true) return null;
  const hostOwnsTerminal = facts.executionId !== null && type !== "run.lost" && type !== "run.timed_out";
  if (hostOwnsTerminal) {
    const finishedAt = facts.finishedAt?.getTime() ?? now;
    const behind = facts.eventsThrough != null && deliveredThrough < facts.eventsThrough;
    if (now - finishedAt < (behind ? HOST_BACKLOG_GRACE_MS : HOST_TERMINAL_GRACE_MS)) return null;
  }
  const payload: ProjectedPayload = { source: "projector" };
  if (type === "run.completed") payload.output = facts.output ?? "";
  else if (facts.error) payload.error = facts.error;
  return {
    job_id: jobId,
    execution_id: facts.executionId ?? PROJECTOR_EXECUTION_ID,
    epoch: facts.epoch,
    seq: PROJECTED_TERMINAL_SEQ,
    type,
    // The same cut a host's event gets: an answer may be bigger than one event may hold.
    payload: capEventPayload(payload).payload,
    ts: new Date(now).toISOString(),
  };
}

/**
 * The `run.started` the projector writes ahead of a projected terminal when Postgres says the
 * execution started but its host never delivered its own (it died with the event in memory), so
 * the stream shows every lifecycle fact Postgres holds, in order. Null when the row never started.
 */
export function projectedStarted(jobId: string, facts: JobStateFacts): EventEnvelope | null {
  if (facts.executionId === null || facts.startedAt === null) return null;
  return {
    job_id: jobId,
    execution_id: facts.executionId,
    epoch: facts.epoch,
    seq: PROJECTED_STARTED_SEQ,
    type: "run.started",
    payload: { source: "projector" },
    ts: facts.startedAt.toISOString(),
  };
}

/** How a job was handed to a new execution: the predecessor's `executions.outcome` → `run.recovered` reason. */
const RECOVERY_REASON_OF: Record<string, string> = { lost: "host_lost", handed_off: "host_shutdown" };

/**
 * The first event the execution `history[i]` would have delivered, as the projector writes it when
 * that execution delivered none: `run.recovered` when it continued the job from the journal (it
 * wrote its journal `recovered` row, or its predecessor ended `lost`/`handed_off`, which only a
 * re-queue for a new execution leaves behind a later one), `run.started` when it is the job's
 * first execution, `run.forked` when it is a fork's first. Null for an execution resuming from a wait: its `run.resumed` names the
 * decision, which Postgres no longer ties to that execution.
 *
 * A projected `run.recovered` carries `source: "projector"`, `reason` and `from_step` always; the
 * host's `discarded_turn`, `unknown_calls` and `sandbox_reset` only when the execution wrote its
 * journal row (they are that row's payload, the same the host would have sent).
 */
export function projectedFirstEvent(
  jobId: string,
  history: readonly ExecutionHistoryEntry[],
  i: number,
): EventEnvelope | null {
  const x = history[i];
  if (!x) return null;
  const before = history[i - 1];
  const base = { job_id: jobId, execution_id: x.executionId, epoch: x.epoch, ts: x.startedAt.toISOString() };
  const handedBy = before?.outcome ? RECOVERY_REASON_OF[before.outcome] : undefined;
  if (!before && x.forkedFrom) {
    // A fork's first execution, whether or not it wrote its journal `recovered` row.
    const payload = { from_job: x.forkedFrom.jobId, from_step: x.forkedFrom.step, source: "projector" as const };
    return { ...base, seq: PROJECTED_RECOVERED_SEQ, type: "run.forked", payload };
  }
  if (x.recovered !== null || handedBy !== undefined) {
    const payload: EventPayload<"run.recovered"> = {
      reason: handedBy ?? "host_lost",
      from_step: x.fromStep,
      ...(x.recovered ?? {}),
      source: "projector",
    };
    return { ...base, seq: PROJECTED_RECOVERED_SEQ, type: "run.recovered", payload };
  }
  if (!before) return { ...base, seq: PROJECTED_STARTED_SEQ, type: "run.started", payload: { source: "projector" } };
  return null;
}

/**
 * The first events of the executions older than `beforeEpoch`, in epoch order: what the projector
 * writes for executions that delivered nothing, ahead of a later execution's first batch or the
 * job's projected end. The log appends only those newer than every event it holds
 * (EventLog.appendProjectedFirsts), so one an execution delivered itself is never repeated.
 */
export function projectedFirstEvents(
  jobId: string,
  history: readonly ExecutionHistoryEntry[],
  beforeEpoch: number,
): EventEnvelope[] {
  const out: EventEnvelope[] = [];
  history.forEach((x, i) => {
    if (x.epoch >= beforeEpoch) return;
    const e = projectedFirstEvent(jobId, history, i);
    if (e) out.push(e);
  });
  return out;
}

/**
 * Why a host's terminal event disagrees with the job row, or null when it agrees: the row must be
 * terminal in the matching state, under the same execution and epoch, and a completion must
 * carry the row's output. A host writes the row before it emits the event (run-job.ts), so an
 * honest terminal event always finds its row already terminal.
 */
export function terminalDisagreement(event: EventEnvelope, facts: JobStateFacts | null): string | null {
  if (!facts) return "the job has no row";
  const expected = terminalEventFor(facts.state);
  if (!expected) return `the job row is ${facts.state}, not terminal`;
  if (expected !== event.type) return `the job row is ${facts.state}, not ${event.type}`;
  if (facts.executionId !== event.execution_id || facts.epoch !== event.epoch) {
    return `the job row ended under execution ${facts.executionId} epoch ${facts.epoch}`;
  }
  if (event.type === "run.completed") {
    const output = event.payload.output ?? null;
    // A host cuts an answer bigger than an event may hold (capEventPayload): then its start.
    const agrees =
      event.payload.truncated === true
        ? typeof output === "string" && facts.output !== null && facts.output.startsWith(output)
        : output === facts.output;
    if (!agrees) return "the output differs from the job row's";
  }
  return null;
}
