/**
 * What the gateway's projector (the job's JobEvents object,
 * workers/durable-objects/job-events/) reads from Postgres: the job row's state and terminal
 * facts (with its current execution's `events_through`), and one execution's epoch and claim
 * token. Read only, one indexed row each. The job's
 * execution history, which also reads the journal, lives beside the journal (journal-repo.ts).
 *
 * Neither read is tenant-scoped, on purpose: the object is named by the job id, which the
 * gateway only hands out after its own tenant check. Callers pass only UUIDs (a non-UUID would
 * fail Postgres' cast); the projector checks that before it asks.
 */
import { and, eq } from "drizzle-orm";
import type { JobError } from "../contracts/job";
import type { JobState } from "../contracts/job-state";
import type { Db } from "./client";
import { executions, jobs } from "./schema";

/** The job row as the projector reads it: its state and the facts a terminal event carries. */
export interface JobStateFacts {
  state: JobState;
  executionId: string | null;
  epoch: number;
  output: string | null;
  error: JobError | null;
  finishedAt: Date | null;
  /** When the current execution's started CAS hit (`execution_started_at`); null if it never started. */
  startedAt: Date | null;
  /**
   * The run's sandbox cleanup fence (`cleanup_pending`): a sandbox may still exist and be removed.
   * Absent (a caller that does not know) counts as clear.
   */
  cleanupPending?: boolean;
  /**
   * The seq of the current execution's last event before its terminal one, as its host wrote it
   * with the terminal state (`executions.events_through`); null/absent when unknown.
   */
  eventsThrough?: number | null;
}

/** What Postgres says about one execution of a job: the epoch it started at and its claim token. */
export interface ExecutionFacts {
  epoch: number;
  /** Null for an execution started before executions kept their token: nothing can verify it. */
  token: string | null;
}

/** The executions row `executionId` of job `jobId`, or null when that job has no such execution. */
export async function executionFacts(db: Db, jobId: string, executionId: string): Promise<ExecutionFacts | null> {
  // executions.job_id references jobs, so a hit also says the job exists.
  const rows = await db
    .select({ epoch: executions.epoch, token: executions.token })
    .from(executions)
    .where(and(eq(executions.id, executionId), eq(executions.jobId, jobId)))
    .limit(1);
  return rows[0] ?? null;
}

/** The job row's state and terminal facts, or null when there is no such job. */
export async function jobStateFacts(db: Db, jobId: string): Promise<JobStateFacts | null> {
  const rows = await db
    .select({
      state: jobs.state,
      executionId: jobs.executionId,
      epoch: jobs.epoch,
      output: jobs.output,
      error: jobs.error,
      finishedAt: jobs.finishedAt,
      startedAt: jobs.executionStartedAt,
      cleanupPending: jobs.cleanupPending,
      eventsThrough: executions.eventsThrough,
    })
    .from(jobs)
    // The current execution's row (primary key): the same one indexed read as before, plus a probe.
    .leftJoin(executions, eq(executions.id, jobs.executionId))
    .where(eq(jobs.id, jobId))
    .limit(1);
  const row = rows[0];
  return row ? { ...row, state: row.state as JobState, error: row.error ?? null } : null;
}
