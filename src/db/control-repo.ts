/**
 * The durable half of cancellation: commit the request in Postgres
 * first. A queued job nobody has claimed, or a waiting one, is cancelled right here (terminal, never starts); a
 * claimed or running job gets `cancel_requested_at` and its owner stops it (a claimed job whose
 * cancel is requested never starts: the host checks before its started CAS, and the reaper's
 * release does not re-queue it). The Redis hint that makes the owner notice fast is the caller's
 * second step.
 */
import { sql } from "drizzle-orm";
import { ApiError } from "../contracts/errors";
import { type CancelOutcome, type InputStatus, LIMITS } from "../contracts/job";
import { utf8Bytes } from "../contracts/text";
import { inputRequestHash } from "../domain/request-hash";
import type { Db } from "./client";
import { resultRows, retryOnDeadlock } from "./client";
import { idempotencyMismatch, isJobId } from "./jobs-repo";
import { CANCELLED_BEFORE_START, jobErrorSql } from "./ownership-repo";

/** A waiting job holds nothing on any host (no owner, no execution): a cancel ends it right here. */
const CANCELLED_WHILE_WAITING = jobErrorSql("cancelled", "cancelled while waiting for an approval or an answer");

export type CancelStatus = CancelOutcome | "not_found";

export async function requestCancel(db: Db, tenantId: string, jobId: string): Promise<CancelStatus> {
  return (await requestTreeCancel(db, tenantId, jobId)).status;
}

/**
 * The cancel of a job and its whole subtree (its children, theirs, …) in one statement, so the
 * durable fact covers every descendant at once whichever hosts run them: each row is cancelled
 * or flagged by the same rule as the job itself. `status` is the job's own; `requested` lists
 * every row (the job or a descendant) whose owner must be told (the caller's hints). A child
 * cancelled here ends before its parent could read it: the parent is cancelled in the same
 * statement, so nothing resumes it and the child's result is never delivered.
 */
export async function requestTreeCancel(
  db: Db,
  tenantId: string,
  jobId: string,
): Promise<{ status: CancelStatus; requested: string[] }> {
  if (!isJobId(jobId)) return { status: "not_found", requested: [] };
  // Rows are locked deepest first (a child before its parent), the order the child-resume
  // trigger takes them in (a child's terminal write holds the child, then waits for the parent),
  // so the two cannot deadlock; rows of one depth by id, so two cancels take them alike. A
  // deadlock with a statement ending many runs in its own row order is still possible: retried.
  const rows = resultRows<{ kind: "job" | "hint"; outcome: CancelStatus | null; id: string | null }>(
    await retryOnDeadlock(() =>
      db.execute(sql`
      WITH RECURSIVE tree AS (
        SELECT id FROM jobs WHERE id = ${jobId} AND tenant_id = ${tenantId}
        UNION ALL
        SELECT c.id FROM jobs c JOIN tree ON c.parent_job_id = tree.id
      ), target AS (
        SELECT j.id, j.state, j.owner FROM jobs j JOIN tree ON tree.id = j.id ORDER BY j.depth DESC, j.id FOR UPDATE OF j
      ), cancelled AS (
        UPDATE jobs SET state = 'cancelled', cancel_requested_at = coalesce(jobs.cancel_requested_at, now()),
          finished_at = now(), waiting_for = NULL, wait_deadline_at = NULL,
          error = CASE WHEN target.state = 'waiting' THEN ${CANCELLED_WHILE_WAITING} ELSE ${CANCELLED_BEFORE_START} END
        FROM target WHERE jobs.id = target.id
          AND ((target.state = 'queued' AND target.owner IS NULL) OR target.state = 'waiting')
        RETURNING jobs.id
      ), requested AS (
        UPDATE jobs SET cancel_requested_at = coalesce(jobs.cancel_requested_at, now())
        FROM target WHERE jobs.id = target.id
          AND (target.state = 'running' OR (target.state = 'queued' AND target.owner IS NOT NULL))
        RETURNING jobs.id
      )
      SELECT 'job' AS kind, CASE
        WHEN EXISTS (SELECT 1 FROM cancelled WHERE id = ${jobId}) THEN 'cancelled'
        WHEN EXISTS (SELECT 1 FROM requested WHERE id = ${jobId}) THEN 'requested'
        WHEN EXISTS (SELECT 1 FROM target WHERE id = ${jobId}) THEN 'already_finished'
        ELSE 'not_found' END AS outcome, NULL AS id
      UNION ALL
      SELECT 'hint', NULL, id FROM requested`),
    ),
  );
  const status = rows.find((r) => r.kind === "job")?.outcome ?? "not_found";
  return { status, requested: rows.filter((r) => r.kind === "hint").map((r) => r.id as string) };
}

export type { InputStatus };

export interface InputRecord {
  id: string;
  status: InputStatus;
  content: string;
  createdAt: Date;
  acceptedAt: Date | null;
  appliedAt: Date | null;
}

/**
 * Append input to a job, durably. Idempotent by key: the same key with the same content returns
 * the first input; with other content it is 409 `idempotency_mismatch` (the key is bound to
 * inputRequestHash; an input stored before hashes were kept matches any content).
 * A job takes at most LIMITS.maxInputsPerJob inputs of at most LIMITS.maxInputBytesPerJob UTF-8
 * bytes in all (409 `input_limit_reached`); a retry of an input already stored is answered even
 * at the cap. The caps are exact under concurrency: the job row carries what its inputs take
 * (input_count, input_bytes), read from the row this statement has locked (FOR UPDATE returns the
 * newest version once the lock is ours) and incremented only by the insert that happened.
 * Counting job_inputs instead read the statement's snapshot, older than the lock wait: 150 inputs
 * at once stored 105-138 of 100 (test/integration/input-race.test.ts).
 * The job row is locked (FOR UPDATE): a concurrent terminal write either commits first (the input
 * is stored as already_finished) or waits for this insert (then the settle trigger marks it).
 * Input to a job waiting on ask_user is its answer: in the same statement the wait is decided
 * (`input`, this input) and the job re-queued (`resumed`), and the resuming execution gives it to
 * the model as the tool result. Input to a job waiting for an approval waits like input to a
 * queued job.
 */
export async function submitInput(
  db: Db,
  tenantId: string,
  jobId: string,
  content: string,
  idempotencyKey: string | null,
): Promise<{ inputId: string; status: InputStatus; created: boolean; resumed: boolean } | null> {
  if (!isJobId(jobId)) return null;
  const hash = idempotencyKey === null ? null : await inputRequestHash(content);
  const bytes = utf8Bytes(content);
  type Outcome = {
    id: string | null;
    status: InputStatus | null;
    kind: "created" | "existing" | "limit";
    request_hash: string | null;
    resumed?: boolean;
  };
  const rows = resultRows<Outcome>(
    await db.execute(sql`
      WITH target AS (
        SELECT id, state, waiting_for, input_count, input_bytes FROM jobs
        WHERE id = ${jobId} AND tenant_id = ${tenantId} FOR UPDATE
      ), twin AS (
        SELECT i.id, i.status, i.request_hash FROM job_inputs i JOIN target ON i.job_id = target.id
        WHERE ${idempotencyKey}::text IS NOT NULL AND i.idempotency_key = ${idempotencyKey}
      ), room AS (
        SELECT (input_count < ${LIMITS.maxInputsPerJob}
          AND input_bytes + ${bytes} <= ${LIMITS.maxInputBytesPerJob}) AS ok FROM target
      ), ins AS (
        INSERT INTO job_inputs (job_id, tenant_id, content, idempotency_key, request_hash, status)
        SELECT id, ${tenantId}, ${content}, ${idempotencyKey}, ${hash},
          CASE WHEN state IN ('queued', 'running', 'waiting') THEN 'requested' ELSE 'already_finished' END
        FROM target, room
        WHERE room.ok AND NOT EXISTS (SELECT 1 FROM twin)
        ON CONFLICT (job_id, idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING
        RETURNING id, status, job_id
      ), answered AS (
        UPDATE job_waits SET decision = 'input', input_id = ins.id, decided_by = 'api', decided_at = now()
        FROM target, ins
        WHERE target.state = 'waiting' AND target.waiting_for->>'kind' = 'input'
          AND job_waits.job_id = target.id AND job_waits.call_id = target.waiting_for->>'call_id'
          AND job_waits.decision IS NULL
        RETURNING job_waits.job_id
      ), counted AS (
        -- One UPDATE of the job row per statement: this one, or resumed's (which counts too).
        UPDATE jobs SET input_count = jobs.input_count + 1, input_bytes = jobs.input_bytes + ${bytes}
        FROM ins WHERE jobs.id = ins.job_id AND NOT EXISTS (SELECT 1 FROM answered)
        RETURNING jobs.id
      ), resumed AS (
        UPDATE jobs SET state = 'queued', waiting_for = NULL, wait_deadline_at = NULL,
          input_count = jobs.input_count + 1, input_bytes = jobs.input_bytes + ${bytes}
        FROM answered WHERE jobs.id = answered.job_id AND jobs.state = 'waiting'
        RETURNING jobs.id
      )
      SELECT id, status, 'created' AS kind, NULL AS request_hash, EXISTS (SELECT 1 FROM resumed) AS resumed FROM ins
      UNION ALL
      SELECT id, status, 'existing', request_hash, false FROM twin
      UNION ALL
      SELECT NULL, NULL, 'limit', NULL, false FROM target, room WHERE NOT room.ok AND NOT EXISTS (SELECT 1 FROM twin)`),
  );
  let row = rows[0];
  if (!row && idempotencyKey) {
    // Target missing (not found / another tenant's), or an idempotent twin committed after our
    // snapshot: read it now.
    const again = resultRows<Outcome>(
      await db.execute(sql`
        SELECT i.id, i.status, 'existing' AS kind, i.request_hash FROM job_inputs i JOIN jobs j ON j.id = i.job_id
        WHERE i.job_id = ${jobId} AND j.tenant_id = ${tenantId} AND i.idempotency_key = ${idempotencyKey}`),
    );
    row = again[0];
  }
  if (!row) return null;
  if (row.kind === "limit") {
    throw new ApiError(
      "input_limit_reached",
      `a job takes at most ${LIMITS.maxInputsPerJob} inputs of ${LIMITS.maxInputBytesPerJob} bytes in all`,
    );
  }
  if (row.kind === "existing" && row.request_hash !== null && row.request_hash !== hash) throw idempotencyMismatch();
  return {
    inputId: row.id as string,
    status: row.status as InputStatus,
    created: row.kind === "created",
    resumed: row.resumed === true,
  };
}

export async function listInputs(db: Db, tenantId: string, jobId: string): Promise<InputRecord[] | null> {
  if (!isJobId(jobId)) return null;
  const owner = resultRows(await db.execute(sql`SELECT 1 FROM jobs WHERE id = ${jobId} AND tenant_id = ${tenantId}`));
  if (owner.length === 0) return null;
  const rows = resultRows<{
    id: string;
    status: InputStatus;
    content: string;
    created_at: string | Date;
    accepted_at: string | Date | null;
    applied_at: string | Date | null;
  }>(
    await db.execute(sql`
      SELECT id, status, content, created_at, accepted_at, applied_at FROM job_inputs
      WHERE job_id = ${jobId} ORDER BY seq`),
  );
  const d = (v: string | Date | null) => (v === null ? null : new Date(v));
  return rows.map((r) => ({
    id: r.id,
    status: r.status,
    content: r.content,
    createdAt: new Date(r.created_at),
    acceptedAt: d(r.accepted_at),
    appliedAt: d(r.applied_at),
  }));
}
