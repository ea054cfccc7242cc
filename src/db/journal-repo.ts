/**
 * The job journal (table `job_journal`): what a run has completed, step by step, so that a new
 * execution can continue the job from there after its host was lost or handed it off
 * (docs/architecture.md, "Recovery"). Two rules make it safe:
 *  - Append-only: a step is one new row (or a few, in one statement); the transcript is never
 *    rewritten, so the WAL a run writes grows with its steps, not with their square.
 *  - Fenced: a row is inserted only while the job is still running under the appending
 *    execution's full identity, the same fence as every owner write (ownership-repo.ts). The
 *    job row is locked FOR SHARE by the insert, so the reaper's re-queue (an UPDATE of that row)
 *    is ordered before or after it, never beside it: a stale owner's append after the re-queue
 *    inserts nothing, and the new execution never reads a row its predecessor wrote later.
 * Model and tool text goes through `storable` (a NUL would fail the statement).
 * `seq` numbers a job's rows across all its executions; the insert takes the next numbers itself
 * (the primary key makes two appends racing for one number fail rather than interleave).
 */
import { sql } from "drizzle-orm";
import { storable } from "../contracts/text";
import type { ExecutionIdentity } from "../domain/identity";
import type { Db } from "./client";
import { resultRows } from "./client";
import type { JOURNAL_KINDS } from "./schema";

export type JournalKind = (typeof JOURNAL_KINDS)[number];

/** One step as written; the payload's shape is the host's (sandbox-host/runner/journal.ts). */
export interface JournalRow {
  kind: JournalKind;
  payload: Record<string, unknown>;
}

/** One step as read back, with its number and the epoch of the execution that wrote it. */
export interface JournalRecord extends JournalRow {
  seq: number;
  epoch: number;
}

/** The fence of a journal append: the job runs under this execution, row locked for the statement. */
const owned = (id: ExecutionIdentity) => sql`
  SELECT id, epoch FROM jobs
  WHERE id = ${id.jobId} AND owner = ${id.host} AND epoch = ${id.epoch} AND token = ${id.token}
    AND execution_id = ${id.executionId} AND state = 'running'
  FOR SHARE`;

/**
 * Append `rows` (in order) as the execution `id`; true when they were written, false when the
 * job no longer runs under `id` (nothing was written: the caller must stop acting under it).
 */
export async function appendJournal(db: Db, id: ExecutionIdentity, rows: JournalRow[]): Promise<boolean> {
  if (rows.length === 0) return true;
  const written = resultRows<{ seq: number }>(
    await db.execute(sql`
      WITH mine AS (${owned(id)}),
      last AS (SELECT coalesce(max(seq), 0) AS seq FROM job_journal WHERE job_id = ${id.jobId})
      INSERT INTO job_journal (job_id, seq, epoch, kind, payload)
      SELECT mine.id, last.seq + r.n, mine.epoch, r.kind, r.payload
      FROM mine, last, jsonb_to_recordset(${JSON.stringify(storable(rows).map((r, i) => ({ n: i + 1, ...r })))}::jsonb)
        AS r(n int, kind text, payload jsonb)
      RETURNING seq`),
  );
  return written.length === rows.length;
}

/**
 * The first write of an execution that recovers a job: the `recovered` row, and the job's
 * `recovery_reason` cleared (so a later execution of the job, one resuming from a wait, is not
 * taken for a recovery), in one statement under the same fence. False: not the owner any more.
 */
export async function markRecovered(db: Db, id: ExecutionIdentity, payload: Record<string, unknown>): Promise<boolean> {
  const rows = resultRows<{ seq: number }>(
    await db.execute(sql`
      WITH mine AS (
        UPDATE jobs SET recovery_reason = NULL
        WHERE id = ${id.jobId} AND owner = ${id.host} AND epoch = ${id.epoch} AND token = ${id.token}
          AND execution_id = ${id.executionId} AND state = 'running'
        RETURNING id, epoch
      ),
      last AS (SELECT coalesce(max(seq), 0) AS seq FROM job_journal WHERE job_id = ${id.jobId})
      INSERT INTO job_journal (job_id, seq, epoch, kind, payload)
      SELECT mine.id, last.seq + 1, mine.epoch, 'recovered', ${JSON.stringify(storable(payload))}::jsonb FROM mine, last
      RETURNING seq`),
  );
  return rows.length === 1;
}

/** Every row of the job's journal, in order (what a recovering execution rebuilds from). */
export async function readJournal(db: Db, jobId: string): Promise<JournalRecord[]> {
  const rows = resultRows<{ seq: number; epoch: number; kind: JournalKind; payload: Record<string, unknown> }>(
    await db.execute(sql`SELECT seq, epoch, kind, payload FROM job_journal WHERE job_id = ${jobId} ORDER BY seq`),
  );
  return rows.map((r) => ({ seq: Number(r.seq), epoch: Number(r.epoch), kind: r.kind, payload: r.payload }));
}

/**
 * The workspace a job of a `workspace: "conversation"` agent starts from: the newest `snapshot`
 * row journaled by the conversation's jobs created before this one whose agent version keeps a
 * conversation workspace (a `run` agent's step snapshots are its own), the newest job first,
 * then its last step; or null. Read once, at the job's first tool call, so a job interrupted by this
 * one counts with the snapshots it had journaled by then. The journal is the home (no table of
 * its own): the blob stays referenced by its row, collected with the job by the retention purge.
 * Walks `jobs_conversation_idx` (tenant, conversation, created_at) and each job's journal key.
 */
export async function lastConversationSnapshot(
  db: Db,
  job: { jobId: string; tenantId: string; conversationId: string },
): Promise<{ jobId: string; payload: Record<string, unknown> } | null> {
  const rows = resultRows<{ job_id: string; payload: Record<string, unknown> }>(
    await db.execute(sql`
      SELECT j.id AS job_id, s.payload
      FROM jobs j
      JOIN agent_versions av ON av.tenant_id = j.tenant_id AND av.name = j.agent_name AND av.version = j.agent_version
        AND av.definition->>'workspace' = 'conversation'
      CROSS JOIN LATERAL (
        SELECT payload FROM job_journal WHERE job_id = j.id AND kind = 'snapshot' ORDER BY seq DESC LIMIT 1
      ) s
      WHERE j.tenant_id = ${job.tenantId} AND j.conversation_id = ${job.conversationId} AND j.id <> ${job.jobId}
        AND j.created_at <= (SELECT created_at FROM jobs WHERE id = ${job.jobId})
      ORDER BY j.created_at DESC, j.id DESC
      LIMIT 1`),
  );
  const row = rows[0];
  return row ? { jobId: row.job_id, payload: row.payload } : null;
}

/**
 * Every execution of the job by epoch, each with the payload of the journal `recovered` row it
 * wrote (null if none) and the journal step the job stood at when it began (the last row an
 * earlier epoch wrote): what the gateway's projector needs to write the first event of an
 * execution whose host delivered none (workers/durable-objects/job-events/postgres-facts.ts).
 * One statement; the subqueries walk only this job's rows (the journal's primary key).
 */
/**
 * One execution of a job as the projector needs it to say which lifecycle event opened it: the
 * `executions` row, the payload of the journal `recovered` row it wrote (markRecovered, its first
 * write when it continues the job from the journal; null if it died before that) and the journal
 * step the job stood at when it began (the last row written by an earlier epoch, 0 for none).
 */
export interface ExecutionHistoryEntry {
  executionId: string;
  epoch: number;
  startedAt: Date;
  /** `executions.outcome`: null while it runs; `lost`/`handed_off` when the job was handed on. */
  outcome: string | null;
  recovered: Record<string, unknown> | null;
  fromStep: number;
  /** The job's fork source (jobs.forked_from_*), null for a job that is no fork: its first execution opens with `run.forked`. */
  forkedFrom?: { jobId: string; step: number } | null;
}

export async function executionHistory(db: Db, jobId: string): Promise<ExecutionHistoryEntry[]> {
  const rows = resultRows<{
    id: string;
    epoch: number;
    started_at: Date | string;
    outcome: string | null;
    recovered: Record<string, unknown> | string | null;
    from_step: number | string;
    forked_from_job_id: string | null;
    forked_from_step: number | string | null;
  }>(
    await db.execute(sql`
      SELECT e.id, e.epoch, e.started_at, e.outcome,
        (SELECT r.payload FROM job_journal r
          WHERE r.job_id = e.job_id AND r.epoch = e.epoch AND r.kind = 'recovered' ORDER BY r.seq LIMIT 1) AS recovered,
        (SELECT coalesce(max(r.seq), 0) FROM job_journal r WHERE r.job_id = e.job_id AND r.epoch < e.epoch) AS from_step,
        j.forked_from_job_id, j.forked_from_step
      FROM executions e JOIN jobs j ON j.id = e.job_id WHERE e.job_id = ${jobId} ORDER BY e.epoch`),
  );
  return rows.map((r) => ({
    executionId: r.id,
    epoch: Number(r.epoch),
    startedAt: new Date(r.started_at),
    outcome: r.outcome,
    recovered: typeof r.recovered === "string" ? (JSON.parse(r.recovered) as Record<string, unknown>) : r.recovered,
    fromStep: Number(r.from_step),
    forkedFrom:
      r.forked_from_job_id !== null && r.forked_from_step !== null
        ? { jobId: r.forked_from_job_id, step: Number(r.forked_from_step) }
        : null,
  }));
}
