/**
 * What the projector asks Postgres when a job's stream has no terminal event yet: the job's state
 * and the facts a terminal event carries. Injectable (JobEventsObject.jobState) so workerd tests
 * can answer for Postgres; the default reads the row over neon-http like the gateway does.
 */
import { eq } from "drizzle-orm";
import type { EventEnvelope, JobError, JobState, TerminalEventType } from "../../src/contracts";
import { createNeonHttpDb } from "../../src/db/neon-http";
import { jobs } from "../../src/db/schema";
import { loadConfig } from "../config";
import type { Env } from "../env";

export interface JobStateFacts {
  state: JobState;
  executionId: string | null;
  epoch: number;
  output: string | null;
  error: JobError | null;
  finishedAt: Date | null;
}

export type JobStateLookup = (jobId: string) => Promise<JobStateFacts | null>;

export function postgresJobStateLookup(env: Env): JobStateLookup {
  return async (jobId) => {
    const config = loadConfig(env);
    const db = createNeonHttpDb({ connectionString: config.databaseUrl, fetchEndpoint: config.neonFetchEndpoint });
    // Not tenant-scoped on purpose: the object is named by the job id, which the gateway only
    // hands out after its own tenant check.
    const rows = await db
      .select({
        state: jobs.state,
        executionId: jobs.executionId,
        epoch: jobs.epoch,
        output: jobs.output,
        error: jobs.error,
        finishedAt: jobs.finishedAt,
      })
      .from(jobs)
      .where(eq(jobs.id, jobId))
      .limit(1);
    const row = rows[0];
    return row ? { ...row, state: row.state as JobState, error: row.error ?? null } : null;
  };
}

const TERMINAL_BY_STATE: Partial<Record<JobState, TerminalEventType>> = {
  completed: "run.completed",
  failed: "run.failed",
  cancelled: "run.cancelled",
  lost: "run.lost",
  timed_out: "run.timed_out",
};

/**
 * The seq of a projected terminal event. Host seqs count from 1 per execution and never come near
 * 2^53 - 1, so (execution_id, seq) cannot collide with a host event of the same execution.
 */
export const PROJECTED_TERMINAL_SEQ = Number.MAX_SAFE_INTEGER;
/** execution_id of a projected terminal event for a job that never started. */
export const PROJECTOR_EXECUTION_ID = "projector";

/**
 * How long after `finished_at` a host-written terminal state (completed/failed/cancelled of a
 * started run) is left for the host's own terminal event: the host writes Postgres first and its
 * outbox delivers within milliseconds, so only a host that died in between is still missing it
 * after 5 s. `lost`, `timed_out` by the reaper and a cancel before start have no host to wait for.
 */
export const HOST_TERMINAL_GRACE_MS = 5_000;

/** The terminal event the projector writes for `facts`, or null if it should not (yet). */
export function projectedTerminal(jobId: string, facts: JobStateFacts, now = Date.now()): EventEnvelope | null {
  const type = TERMINAL_BY_STATE[facts.state];
  if (!type) return null;
  const hostOwnsTerminal = facts.executionId !== null && type !== "run.lost" && type !== "run.timed_out";
  if (hostOwnsTerminal) {
    const finishedAt = facts.finishedAt?.getTime() ?? now;
    if (now - finishedAt < HOST_TERMINAL_GRACE_MS) return null;
  }
  const payload: Record<string, unknown> = { source: "projector" };
  if (type === "run.completed") payload.output = facts.output ?? "";
  else if (facts.error) payload.error = facts.error;
  return {
    job_id: jobId,
    execution_id: facts.executionId ?? PROJECTOR_EXECUTION_ID,
    epoch: facts.epoch,
    seq: PROJECTED_TERMINAL_SEQ,
    type,
    payload,
    ts: new Date(now).toISOString(),
  };
}
