/**
 * The waitpoint in Postgres: the owner's suspend (fenced like every owner write), the decisions
 * that end a wait (an approval by the API, an answer by POST …/input in control-repo.ts, a
 * deadline by the reapers), and what a resuming execution reads. A waiting job has no owner, no
 * execution and no claim: the suspend clears them in the same statement that ends the execution
 * `suspended`, so the job holds nothing on any host while it waits, and a decision makes it
 * claimable exactly like a submitted job (the `claimable` fragment, ownership-repo.ts).
 */
import { sql } from "drizzle-orm";
import { storable } from "../contracts/text";
import type { WaitDecision, WaitKind } from "../contracts/wait";
import type { ExecutionIdentity } from "../domain/identity";
import { isUuid } from "../domain/uuid";
import { type Db, resultRows, retryOnDeadlock } from "./client";
import { FACTS_SET, factAges, jobErrorSql, type PendingFacts } from "./ownership-repo";
import { jobs } from "./schema";

/** ISO 8601 UTC with milliseconds, the API's timestamp form. */
const iso = (expr: ReturnType<typeof sql>) =>
  sql`to_char((${expr}) at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"')`;

export interface Suspension {
  kind: WaitKind;
  callId: string;
  tool: string;
  arguments: unknown;
  question: string | null;
  deadlineS: number;
  onDeadline: "deny" | "fail";
  /** The host's checkpoint (RunCheckpoint, sandbox-host/runner/waitpoint.ts), stored as given. */
  checkpoint: Record<string, unknown>;
  /**
   * Timing facts the run observed that no fenced write carried yet: a suspension is this
   * execution's last write, so it lands them (a run suspending before its first heartbeat would
   * otherwise leave prepared_at and first_output_at to the resumed execution, too late).
   */
  facts?: PendingFacts;
  /** Kind `children`: the child jobs the turn's delegate calls create, inserted in the same statement. */
  children?: ChildJob[];
}

/** A child job a delegate call creates: queued like a submitted job, same tenant, its agent pinned. */
export interface ChildJob {
  id: string;
  /** The delegate call it answers. */
  callId: string;
  agentName: string;
  agentVersion: number;
  model: string;
  tools: string[];
  /** The agent's limits.timeout_s in ms; null: the jobs table's default. */
  timeoutMs: number | null;
  /** The delegate call's `input`: the child's one user message. */
  input: string;
  /** The delegate call's span as a W3C traceparent: the child's run joins the parent's trace there. */
  traceparent?: string | null;
}

export type SuspendResult =
  | { suspended: true; deadlineAt: string }
  /** A cancel was requested first: end the run cancelled instead (the fence still holds). */
  | { suspended: false; cancelRequested: boolean };

/**
 * The suspend, one statement: as the running owner (the full execution fence), the job becomes
 * `waiting` with what it waits for and its checkpoint, loses owner, claim and execution (so no
 * heartbeat, reaper or janitor treats it as running), the execution ends `suspended`, and the
 * waitpoint's job_waits row is written (or, for a call decided before, opened again: a recovery
 * asks a person again about an approved call whose outcome is unknown). A job whose cancel was
 * requested does not suspend.
 */
export async function suspendJob(db: Db, id: ExecutionIdentity, suspension: Suspension): Promise<SuspendResult> {
  // The checkpoint, the question, the arguments and the children's inputs are model text.
  const s = storable(suspension);
  const deadline = sql`now() + make_interval(secs => ${s.deadlineS})`;
  const ages = factAges(s.facts, performance.now());
  const rows = resultRows<{ kind: "suspended" | "cancel"; deadline_at: string | null }>(
    await db.execute(sql`
      WITH target AS (
        SELECT id, cancel_requested_at, tenant_id, root_job_id, depth, priority FROM jobs
        WHERE id = ${id.jobId} AND owner = ${id.host} AND epoch = ${id.epoch} AND token = ${id.token}
          AND execution_id = ${id.executionId} AND state = 'running'
      ), waited AS (
        UPDATE jobs SET state = 'waiting', owner = NULL, claimed_at = NULL, token = NULL, execution_id = NULL,
          execution_started_at = NULL, heartbeat_at = NULL, deadline_at = NULL, ${FACTS_SET},
          wait_deadline_at = ${deadline},
          checkpoint = ${JSON.stringify(s.checkpoint)}::jsonb,
          waiting_for = jsonb_build_object('kind', ${s.kind}::text, 'call_id', ${s.callId}::text,
            'tool', ${s.tool}::text, 'arguments', ${JSON.stringify(s.arguments ?? null)}::jsonb,
            'question', ${s.question}::text, 'since', ${iso(sql`now()`)}, 'deadline_at', ${iso(deadline)},
            'on_deadline', ${s.onDeadline}::text)
        FROM target, (SELECT ${ages.p}::float8 AS p_ago, ${ages.f}::float8 AS f_ago) AS m
        WHERE jobs.id = target.id AND target.cancel_requested_at IS NULL
        RETURNING jobs.id, jobs.wait_deadline_at
      ), ended AS (
        UPDATE executions SET finished_at = now(), outcome = 'suspended'
        FROM waited WHERE executions.id = ${id.executionId}
      ), wait AS (
        INSERT INTO job_waits (job_id, call_id, kind, tool, execution_id, deadline_at)
        SELECT id, ${s.callId}, ${s.kind}, ${s.tool}, ${id.executionId}::uuid, wait_deadline_at FROM waited
        ON CONFLICT (job_id, call_id) DO UPDATE SET execution_id = EXCLUDED.execution_id, requested_at = now(),
          deadline_at = EXCLUDED.deadline_at, decision = NULL, note = NULL, input_id = NULL, decided_by = NULL,
          decided_at = NULL
        -- A decided call waiting again: a recovery found the approved call in flight, and asks again.
        WHERE job_waits.decision IS NOT NULL
      )${childrenSql(id, s.children ?? [])}
      SELECT 'suspended' AS kind, ${iso(sql`wait_deadline_at`)} AS deadline_at FROM waited
      UNION ALL
      SELECT 'cancel', NULL FROM target WHERE target.cancel_requested_at IS NOT NULL`),
  );
  const row = rows[0];
  if (row?.kind === "suspended") return { suspended: true, deadlineAt: row.deadline_at as string };
  return { suspended: false, cancelRequested: row?.kind === "cancel" };
}

/**
 * The children's insert, a CTE of the suspend: only when the suspend itself happened (so a
 * fenced-out or cancelled parent creates none). A child gets the parent's tenant, the root of
 * the parent's tree (the parent itself when it is a root), depth + 1, which execution and call
 * of the parent it answers, and the parent's priority (it is the parent's work, admitted in the
 * same tenant's share; no delay, ttl or key: a waiting parent must not wait on a child that
 * expired or queues behind its own key). The insert trigger announces each on ear_ready like a submit.
 */
function childrenSql(id: ExecutionIdentity, children: ChildJob[]) {
  if (children.length === 0) return sql``;
  const rows = sql.join(
    children.map(
      (c) =>
        sql`(${c.id}::uuid, ${c.callId}::text, ${c.agentName}::text, ${c.agentVersion}::int, ${c.model}::text,
          ${JSON.stringify(c.tools)}::jsonb, ${c.timeoutMs ?? (jobs.timeoutMs.default as number)}::int,
          ${JSON.stringify({ messages: [{ role: "user", content: c.input }] })}::jsonb, ${c.traceparent ?? null}::text)`,
    ),
    sql`, `,
  );
  return sql`, spawned AS (
        INSERT INTO jobs (id, tenant_id, input, model, tools, agent_name, agent_version, timeout_ms,
          parent_job_id, parent_execution_id, parent_call_id, root_job_id, depth, traceparent, priority)
        SELECT v.id, t.tenant_id, v.input, v.model, v.tools, v.agent_name, v.agent_version,
          v.timeout_ms,
          t.id, ${id.executionId}::uuid, v.call_id, coalesce(t.root_job_id, t.id), t.depth + 1, v.traceparent, t.priority
        FROM waited JOIN target t ON t.id = waited.id,
          (VALUES ${rows}) AS v(id, call_id, agent_name, agent_version, model, tools, timeout_ms, input, traceparent)
      )`;
}

export interface RecordedDecision {
  callId: string;
  kind: WaitKind;
  decision: WaitDecision;
  note: string | null;
  decidedAt: Date;
  decidedBy: "api" | "deadline";
  /** A budget wait's approval: the US dollars it added. */
  addUsd: number | null;
}

export type DecideResult =
  | { status: "recorded"; decision: RecordedDecision }
  /** The call was decided before: the recorded decision (the caller compares it with its own). */
  | { status: "existing"; decision: RecordedDecision }
  /** The call exists but the job does not wait on it (it was cancelled, or it is a question). */
  | { status: "not_waiting"; kind: WaitKind }
  /** The job exists but never waited on this call. */
  | { status: "unknown_call" }
  /** An approval of a `budget` wait without add_usd, or add_usd on any other wait (nothing recorded). */
  | { status: "add_usd"; kind: WaitKind }
  /** No such job for this tenant. */
  | { status: "not_found" };

interface DecisionRow {
  kind: "recorded" | "existing" | "no_call";
  wait_kind: WaitKind;
  decision: WaitDecision | null;
  note: string | null;
  decided_at: string | Date | null;
  decided_by: "api" | "deadline" | null;
  add_usd: string | number | null;
}

function toDecision(callId: string, r: DecisionRow): RecordedDecision {
  return {
    callId,
    kind: r.wait_kind,
    decision: r.decision as WaitDecision,
    note: r.note,
    decidedAt: new Date(r.decided_at as string),
    decidedBy: r.decided_by as "api" | "deadline",
    addUsd: r.add_usd === null ? null : Number(r.add_usd),
  };
}

/**
 * Record an approve/deny for the call a job waits on and re-queue the job, in one statement
 * (tenant-scoped). Only the first decision of a call is recorded; later ones read it back. A
 * `budget` wait's approval adds `addUsd` to the tree's limit (budget_added_usd of the root job:
 * the job itself when it is a root, in the same UPDATE, as one statement may change a row once);
 * it must carry one, and an approval of any other wait must not (`add_usd` status).
 */
export async function decideApproval(
  db: Db,
  tenantId: string,
  jobId: string,
  callId: string,
  decision: "approve" | "deny",
  note: string | null,
  addUsd: number | null = null,
): Promise<DecideResult> {
  if (!isUuid(jobId)) return { status: "not_found" };
  // The kinds this decision may end: a budget approval needs add_usd, nothing else takes it.
  const kinds =
    addUsd !== null ? sql`('budget')` : decision === "approve" ? sql`('approval')` : sql`('approval', 'budget')`;
  const run = async () =>
    resultRows<DecisionRow>(
      await db.execute(sql`
        WITH target AS (
          SELECT id, state, waiting_for, root_job_id FROM jobs WHERE id = ${jobId} AND tenant_id = ${tenantId} FOR UPDATE
        ), decided AS (
          UPDATE job_waits SET decision = ${decision}, note = ${note}, add_usd = ${addUsd}::numeric,
            decided_by = 'api', decided_at = now()
          FROM target
          WHERE job_waits.job_id = target.id AND job_waits.call_id = ${callId} AND job_waits.decision IS NULL
            AND job_waits.kind IN ${kinds} AND target.state = 'waiting' AND target.waiting_for->>'call_id' = ${callId}
          RETURNING job_waits.*
        ), requeued AS (
          UPDATE jobs SET state = 'queued', waiting_for = NULL, wait_deadline_at = NULL,
            budget_added_usd = jobs.budget_added_usd + CASE WHEN jobs.root_job_id IS NULL THEN coalesce(decided.add_usd, 0) ELSE 0 END
          FROM decided WHERE jobs.id = decided.job_id AND jobs.state = 'waiting'
          RETURNING jobs.id
        ), raised AS (
          UPDATE jobs SET budget_added_usd = jobs.budget_added_usd + decided.add_usd
          FROM decided, target
          WHERE decided.add_usd IS NOT NULL AND target.root_job_id IS NOT NULL AND jobs.id = target.root_job_id
        )
        SELECT 'recorded' AS kind, d.kind AS wait_kind, d.decision, d.note, d.decided_at, d.decided_by, d.add_usd
        FROM decided d, requeued
        UNION ALL
        SELECT 'existing', w.kind, w.decision, w.note, w.decided_at, w.decided_by, w.add_usd
        FROM job_waits w JOIN target ON w.job_id = target.id
        WHERE w.call_id = ${callId} AND NOT EXISTS (SELECT 1 FROM decided)
        UNION ALL
        SELECT 'no_call', NULL, NULL, NULL, NULL, NULL, NULL FROM target
        WHERE NOT EXISTS (SELECT 1 FROM job_waits w WHERE w.job_id = target.id AND w.call_id = ${callId})`),
    );
  let rows = await run();
  // A concurrent decision that committed while this statement waited for the row lock is not in
  // this statement's snapshot of job_waits: one more statement reads it.
  if (rows[0]?.kind === "existing" && rows[0].decision === null) rows = await run();
  const row = rows[0];
  if (!row) return { status: "not_found" };
  if (row.kind === "no_call") return { status: "unknown_call" };
  if (row.decision === null) {
    // Undecided but not decided by this: an add_usd that does not fit the wait's kind, or a job no longer waiting.
    const budgetWithout = row.wait_kind === "budget" && decision === "approve" && addUsd === null;
    const addOnOther = row.wait_kind === "approval" && addUsd !== null;
    if (budgetWithout || addOnOther) return { status: "add_usd", kind: row.wait_kind };
    return { status: "not_waiting", kind: row.wait_kind };
  }
  return { status: row.kind === "recorded" ? "recorded" : "existing", decision: toDecision(callId, row) };
}

/** The message a deadline's denial gives the model as the tool result. */
export const DEADLINE_NOTE = "nobody answered before the deadline";

const APPROVAL_EXPIRED = jobErrorSql("approval_expired", "the wait for an approval or an answer passed its deadline");

/**
 * End every wait past its deadline: `on_deadline: deny` records a denial (by `deadline`) and
 * re-queues the job; `fail` fails it `approval_expired`. Idempotent and safe to run anywhere,
 * any number of times at once (every host's reaper and the Worker's cron backstop do): each row
 * is re-checked as `waiting` and past its deadline inside the UPDATE. Returns the re-queued jobs
 * (for the ready index) and the failed ones.
 */
export async function expireWaits(
  db: Db,
  limit = 500,
): Promise<{ requeued: Array<{ id: string; createdAt: Date }>; failed: string[] }> {
  const rows = resultRows<{ id: string; created_at: string | Date; state: string }>(
    // Retried on deadlock: the waits it fails may be children's (the resume trigger).
    await retryOnDeadlock(() =>
      db.execute(sql`
      WITH due AS (
        SELECT id, waiting_for FROM jobs WHERE state = 'waiting' AND wait_deadline_at < now()
        ORDER BY wait_deadline_at LIMIT ${limit} FOR UPDATE SKIP LOCKED
      ), ended AS (
        UPDATE jobs SET
          state = CASE WHEN due.waiting_for->>'on_deadline' = 'fail' THEN 'failed' ELSE 'queued' END,
          finished_at = CASE WHEN due.waiting_for->>'on_deadline' = 'fail' THEN now() END,
          error = CASE WHEN due.waiting_for->>'on_deadline' = 'fail' THEN ${APPROVAL_EXPIRED} END,
          waiting_for = NULL, wait_deadline_at = NULL
        FROM due WHERE jobs.id = due.id AND jobs.state = 'waiting' AND jobs.wait_deadline_at < now()
        RETURNING jobs.id, jobs.created_at, jobs.state, due.waiting_for->>'call_id' AS call_id
      ), decided AS (
        UPDATE job_waits SET decision = 'deny', note = ${DEADLINE_NOTE}, decided_by = 'deadline', decided_at = now()
        FROM ended WHERE job_waits.job_id = ended.id AND job_waits.call_id = ended.call_id
          AND job_waits.decision IS NULL
      )
      SELECT id, created_at, state FROM ended`),
    ),
  );
  return {
    requeued: rows.filter((r) => r.state === "queued").map((r) => ({ id: r.id, createdAt: new Date(r.created_at) })),
    failed: rows.filter((r) => r.state === "failed").map((r) => r.id),
  };
}

/** How the wait a resuming execution continues from ended, or null when the call is undecided. */
export interface ResumeDecision {
  kind: WaitKind;
  decision: WaitDecision;
  note: string | null;
  decidedBy: "api" | "deadline" | "children";
  /** From the suspend to the decision. */
  waitedMs: number;
  /** The answer to ask_user (its job_inputs row), when the decision is `input`. */
  input: { id: string; content: string } | null;
}

/** The decision on `callId`, read by the execution that resumes from the checkpoint. */
export async function resumeDecision(db: Db, jobId: string, callId: string): Promise<ResumeDecision | null> {
  const rows = resultRows<{
    kind: WaitKind;
    decision: WaitDecision | null;
    note: string | null;
    decided_by: "api" | "deadline" | "children";
    waited_ms: string | number;
    input_id: string | null;
    content: string | null;
  }>(
    await db.execute(sql`
      SELECT w.kind, w.decision, w.note, w.decided_by,
        round(extract(epoch FROM w.decided_at - w.requested_at) * 1000) AS waited_ms, w.input_id, i.content
      FROM job_waits w LEFT JOIN job_inputs i ON i.id = w.input_id
      WHERE w.job_id = ${jobId} AND w.call_id = ${callId}`),
  );
  const r = rows[0];
  if (!r || r.decision === null) return null;
  return {
    kind: r.kind,
    decision: r.decision,
    note: r.note,
    decidedBy: r.decided_by,
    waitedMs: Math.max(0, Number(r.waited_ms)),
    input: r.input_id !== null && r.content !== null ? { id: r.input_id, content: r.content } : null,
  };
}
