/**
 * Job reads and writes the gateway needs. Owner writes (claim, start, heartbeat, timing,
 * terminal) live in ownership-repo.ts, each fenced by the owner's identity.
 */
import { and, count, desc, eq, sql } from "drizzle-orm";
import { ApiError } from "../contracts/errors";
import type { CreateJobBody, JobState } from "../contracts/job";
import { jobRequestHash } from "../domain/request-hash";
import { isUuid } from "../domain/uuid";
import type { Db } from "./client";
import { apiKeys, type JobRow, jobs } from "./schema";

/** An id that is not a UUID cannot name a job; answering "not found" without a query avoids a cast error. */
export function isJobId(id: string): boolean {
  return isUuid(id);
}

export async function findTenantIdByKeyHash(db: Db, keyHash: string): Promise<string | null> {
  const rows = await db
    .select({ tenantId: apiKeys.tenantId, revokedAt: apiKeys.revokedAt })
    .from(apiKeys)
    .where(eq(apiKeys.keyHash, keyHash))
    .limit(1);
  const row = rows[0];
  return row && row.revokedAt === null ? row.tenantId : null;
}

export interface CreatedJob {
  job: JobRow;
  /** false when an earlier request with the same idempotency key created it. */
  created: boolean;
}

export function idempotencyMismatch(): ApiError {
  return new ApiError(
    "idempotency_mismatch",
    "idempotency_key was already used with a different request body; use a new key for a new request",
  );
}

/** Retry-After for a full queue: hosts drain a queue in seconds when they have slots at all. */
export const QUEUE_FULL_RETRY_AFTER_S = 5;

/**
 * The tenant's queued jobs, by the partial index jobs_tenant_queued_idx. The count and the insert
 * are two statements, so a burst of concurrent submits can each see room and together pass the
 * limit by up to the number in flight at once (a single INSERT … SELECT would not close that
 * either: under READ COMMITTED concurrent inserts do not see each other). It is a guard against
 * one tenant filling the queue, not an exact quota.
 */
async function queueHasRoom(db: Db, tenantId: string, maxQueued: number): Promise<boolean> {
  const [row] = await db
    .select({ n: count() })
    .from(jobs)
    .where(and(eq(jobs.tenantId, tenantId), eq(jobs.state, "queued")));
  return (row?.n ?? 0) < maxQueued;
}

async function findByIdempotencyKey(db: Db, tenantId: string, key: string): Promise<JobRow | null> {
  const [existing] = await db
    .select()
    .from(jobs)
    .where(and(eq(jobs.tenantId, tenantId), eq(jobs.idempotencyKey, key)))
    .limit(1);
  return existing ?? null;
}

/**
 * Insert a job, or with an idempotency key return the job that key already made. The key is
 * bound to `requestHash` (default: jobRequestHash of the body; chat passes the hash of what its
 * client sent, since the job input it builds includes history that changes between retries):
 * the same key with a different request is 409 `idempotency_mismatch`, never the old job
 * pretending to be the new one. A row from before hashes were stored (null) matches any body.
 *
 * `opts.maxQueued` (> 0): refuse with 429 `rate_limited` when the tenant already has that many
 * queued jobs; an idempotent replay of a job that exists is answered (or refused as a mismatch),
 * never refused as over the limit.
 */
export async function createJob(
  db: Db,
  tenantId: string,
  id: string,
  body: CreateJobBody,
  opts: { requestHash?: string; maxQueued?: number } = {},
): Promise<CreatedJob> {
  const hash = body.idempotency_key ? (opts.requestHash ?? (await jobRequestHash(body))) : null;
  if (opts.maxQueued && opts.maxQueued > 0 && !(await queueHasRoom(db, tenantId, opts.maxQueued))) {
    const replay = body.idempotency_key ? await findByIdempotencyKey(db, tenantId, body.idempotency_key) : null;
    if (replay) return idempotentReplay(replay, hash);
    throw new ApiError("rate_limited", `this tenant already has ${opts.maxQueued} queued jobs (the limit)`, {
      retryAfterS: QUEUE_FULL_RETRY_AFTER_S,
    });
  }
  const values = {
    id,
    tenantId,
    conversationId: body.conversation_id ?? null,
    input: body.input,
    model: body.model ?? null,
    tools: body.tools ?? [],
    metadata: body.metadata ?? {},
    idempotencyKey: body.idempotency_key ?? null,
    requestHash: hash,
  };
  if (!body.idempotency_key) {
    const [job] = await db.insert(jobs).values(values).returning();
    return { job: job as JobRow, created: true };
  }
  const inserted = await db
    .insert(jobs)
    .values(values)
    .onConflictDoNothing({
      target: [jobs.tenantId, jobs.idempotencyKey],
      where: sql`${jobs.idempotencyKey} is not null`,
    })
    .returning();
  if (inserted[0]) return { job: inserted[0] as JobRow, created: true };
  const existing = await findByIdempotencyKey(db, tenantId, body.idempotency_key);
  if (!existing) throw new Error("idempotent insert conflicted but no row was found");
  return idempotentReplay(existing, hash);
}

/** The job an idempotency key already made, if the request is the same one (null: a row from before hashes). */
function idempotentReplay(existing: JobRow, hash: string | null): CreatedJob {
  if (existing.requestHash !== null && existing.requestHash !== hash) throw idempotencyMismatch();
  return { job: existing, created: false };
}

export async function getJob(db: Db, tenantId: string, id: string): Promise<JobRow | null> {
  if (!isJobId(id)) return null;
  const rows = await db
    .select()
    .from(jobs)
    .where(and(eq(jobs.id, id), eq(jobs.tenantId, tenantId)))
    .limit(1);
  return rows[0] ?? null;
}

/**
 * The tenant check alone (the SSE route): one indexed row, the key and finished_at (the event
 * log's retention counts from it). Returns the id as Postgres spells it (an upper-case UUID in
 * the URL names the same job, and the same object).
 */
export async function tenantJobId(
  db: Db,
  tenantId: string,
  id: string,
): Promise<{ id: string; finishedAt: Date | null } | null> {
  if (!isJobId(id)) return null;
  const rows = await db
    .select({ id: jobs.id, finishedAt: jobs.finishedAt })
    .from(jobs)
    .where(and(eq(jobs.id, id), eq(jobs.tenantId, tenantId)))
    .limit(1);
  return rows[0] ?? null;
}

export interface ListCursor {
  /** ISO 8601 with Postgres' microseconds (a JavaScript Date keeps only milliseconds). */
  createdAt: string;
  id: string;
}

const CURSOR_TIME_RE = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d{1,6})?Z$/;

export function encodeCursor(c: ListCursor): string {
  return btoa(JSON.stringify([c.createdAt, c.id])).replace(/=+$/, "");
}

export function decodeCursor(s: string): ListCursor | null {
  try {
    const [createdAt, id] = JSON.parse(atob(s)) as unknown[];
    if (typeof createdAt !== "string" || typeof id !== "string" || !isJobId(id)) return null;
    // The timestamp goes to Postgres as text: accept only the UTC ISO form encodeCursor writes,
    // naming a real instant. Date.parse rolls 2026-02-31 over to March 3 where Postgres refuses
    // it, so the calendar fields must survive the round trip unchanged.
    if (!CURSOR_TIME_RE.test(createdAt)) return null;
    const parsed = new Date(createdAt);
    if (!Number.isFinite(parsed.getTime()) || parsed.toISOString().slice(0, 19) !== createdAt.slice(0, 19)) return null;
    return { createdAt, id };
  } catch {
    return null;
  }
}

/**
 * created_at exactly as stored. The cursor must carry microseconds: cut to a Date's milliseconds,
 * a job created in the same millisecond as the page's last one but a few microseconds earlier
 * matches neither `<` nor `=` and is skipped (the conformance suite in
 * test/integration/pg-proxy.test.ts covers it).
 */
const exactCreatedAt = sql<string>`to_char(${jobs.createdAt} at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')`;

/** Newest first, keyset-paginated on (created_at, id) so pages never skip or repeat a job. */
export async function listJobs(
  db: Db,
  tenantId: string,
  opts: { state?: JobState; limit: number; cursor?: ListCursor },
): Promise<{ jobs: JobRow[]; nextCursor: string | null }> {
  const conds = [eq(jobs.tenantId, tenantId)];
  if (opts.state) conds.push(eq(jobs.state, opts.state));
  if (opts.cursor) {
    // (created_at, id) strictly after the cursor in the page order.
    conds.push(sql`(${jobs.createdAt}, ${jobs.id}) < (${opts.cursor.createdAt}::timestamptz, ${opts.cursor.id}::uuid)`);
  }
  const rows = await db
    .select({ job: jobs, exactCreatedAt })
    .from(jobs)
    .where(and(...conds))
    .orderBy(desc(jobs.createdAt), desc(jobs.id))
    .limit(opts.limit + 1);
  const page = rows.slice(0, opts.limit);
  const last = page[page.length - 1];
  const nextCursor =
    rows.length > opts.limit && last ? encodeCursor({ createdAt: last.exactCreatedAt, id: last.job.id }) : null;
  return { jobs: page.map((r) => r.job), nextCursor };
}
