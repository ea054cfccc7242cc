/**
 * Job reads and writes the gateway needs. Owner writes (claim, start, heartbeat, timing,
 * terminal) live in ownership-repo.ts, each fenced by the owner's identity.
 */
import { and, desc, eq, getTableColumns, type SQL, sql } from "drizzle-orm";
import { ApiError } from "../contracts/errors";
import { FORK_REASON } from "../contracts/fork";
import type { CreateJobBody, JobState } from "../contracts/job";
import { storable } from "../contracts/text";
import { admissionError, queueFullRefusal } from "../domain/job-admission";
import { jobRequestHash } from "../domain/request-hash";
import { clientTraceContext } from "../domain/traceparent";
import { isUuid } from "../domain/uuid";
import { queueFitsSql } from "./admission-repo";
import { type BudgetRefusal, budgetExceeded, budgetRefusal, overBudgetSql } from "./budget-repo";
import { type Db, resultRows } from "./client";
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

/**
 * The agent version a submit resolved its `agent` to (workers/commands/submit.ts): what the job
 * row records and runs with, instead of the body's model and tools.
 */
export interface ResolvedAgent {
  name: string;
  version: number;
  model: string;
  /** Sandbox tools, and an agent's code tools. */
  tools: string[];
  /** The agent's limits.timeout_s in ms; null: the jobs table's default. */
  timeoutMs: number | null;
  /** The agent's default `priority`, for a body that gives none. */
  priority: number;
}

/** A raw `RETURNING *` row of jobs as drizzle maps it (column names → fields, driver values → JS). */
function jobFromRow(raw: Record<string, unknown>): JobRow {
  const row: Record<string, unknown> = {};
  for (const [field, column] of Object.entries(getTableColumns(jobs))) {
    const value = raw[column.name];
    row[field] = value === null || value === undefined ? null : column.mapFromDriverValue(value);
  }
  return row as JobRow;
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
 * queued jobs; refuse with 429 `budget_exceeded` when its daily budget is spent (budget-repo.ts):
 * job admission's checks 3 and 4 (src/domain/job-admission.ts), gated inside the insert. The
 * caller checked the model and tools (checks 1 and 2) before.
 * An idempotent replay of a job that exists is answered (or refused as a mismatch), never
 * refused as over the limit or the budget.
 */
export async function createJob(
  db: Db,
  tenantId: string,
  id: string,
  body: CreateJobBody,
  opts: {
    requestHash?: string;
    maxQueued?: number;
    agent?: ResolvedAgent;
    /** The client's traceparent header, and whether the operator lets it parent the run (clientTraceContext). */
    traceparent?: string | null;
    trustClientTrace?: boolean;
    /** The job is a fork: its journal starts as a copy of the source's prefix (ForkOf). */
    fork?: ForkOf;
  } = {},
): Promise<CreatedJob> {
  const hash = body.idempotency_key ? (opts.requestHash ?? (await jobRequestHash(body))) : null;
  const maxQueued = opts.maxQueued && opts.maxQueued > 0 ? opts.maxQueued : 0;
  const agent = opts.agent;
  const { model, tools } = runsWith(body, agent);
  // Only a valid one is kept (an invalid header is ignored, as a W3C receiver does), as a link
  // unless the operator trusts clients' trace context.
  const trace = clientTraceContext(opts.traceparent, opts.trustClientTrace === true);
  // Without an agent timeout the column's default applies (one home for the default).
  const timeout =
    agent?.timeoutMs != null ? { column: sql`, timeout_ms`, value: sql`, ${agent.timeoutMs}::int` } : null;
  // One statement, one round trip (each is an HTTP request on the gateway's driver): the queue
  // and budget checks gate the insert (queueFitsSql says how exact the cap is).
  // An idempotency key already used makes the insert a no-op, like a full queue; the lookup
  // below tells the two apart (a replay is answered, never refused as over the limit).
  const a = admissionOf(body, agent);
  const fork = opts.fork;
  const forkColumns = fork ? sql`, forked_from_job_id, forked_from_step, recovery_reason` : sql``;
  const forkValues = fork ? sql`, ${fork.jobId}::uuid, ${fork.step}::int, ${FORK_REASON}` : sql``;
  const insert = sql`
      INSERT INTO jobs (id, tenant_id, conversation_id, input, model, tools, metadata, idempotency_key, request_hash,
        agent_name, agent_version, traceparent, client_traceparent, priority, run_at, expires_at, concurrency_key, limits${timeout?.column ?? sql``}${forkColumns})
      SELECT ${id}::uuid, ${tenantId}, ${body.conversation_id ?? null}, ${JSON.stringify(body.input)}::jsonb,
        ${model}, ${JSON.stringify(tools)}::jsonb, ${JSON.stringify(body.metadata ?? {})}::jsonb,
        ${body.idempotency_key ?? null}, ${hash}, ${agent?.name ?? null}, ${agent?.version ?? null}::int,
        ${trace.traceparent}, ${trace.link}, ${a.priority}::int, ${runAtSql(sql`${a.delay_s}::int`, sql`${a.run_at}::timestamptz`)},
        ${expiresAtSql(sql`${a.delay_s}::int`, sql`${a.run_at}::timestamptz`, sql`${a.ttl_s}::int`)},
        ${a.concurrency_key}, ${body.limits ? JSON.stringify(body.limits) : null}::jsonb${timeout?.value ?? sql``}${forkValues}
      WHERE ${queueFitsSql(tenantId, maxQueued)} AND NOT ${overBudgetSql(tenantId)}
      ON CONFLICT (tenant_id, idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING
      RETURNING *`;
  const inserted = resultRows<Record<string, unknown>>(
    await db.execute(fork ? withForkedJournal(insert, fork) : insert),
  );
  if (inserted[0]) return { job: jobFromRow(inserted[0]), created: true };
  const existing = body.idempotency_key ? await findByIdempotencyKey(db, tenantId, body.idempotency_key) : null;
  if (existing) return idempotentReplay(existing, hash);
  // The refusal path only: which gate closed (a budget spent, or the queue full) is read again.
  const refusal = await budgetRefusal(db, tenantId);
  if (refusal) throw budgetExceeded(refusal);
  if (maxQueued === 0) throw new Error("idempotent insert conflicted but no row was found");
  throw admissionError(queueFullRefusal(maxQueued));
}

/**
 * A fork's source and what its journal starts with: the source's rows 1..`step`, copied (the
 * replaced call's `result` row with `replace`'s content instead), then `extra` rows (a replaced
 * open call's result, appended messages), numbered from `step` + 1. The copies are written at
 * epoch 0 (before any execution of the fork), so the fork's first execution reads them as an
 * earlier execution's steps and its `run.forked.from_step` is `step`.
 */
export interface ForkOf {
  jobId: string;
  step: number;
  replace: { callId: string; content: string } | null;
  extra: Array<{ kind: string; payload: Record<string, unknown> }>;
}

/**
 * The insert of a fork's row, with its journal's copy of the prefix in the same statement (the
 * source's rows are only read: an INSERT … SELECT from them). No row inserted (a replay, a full
 * queue): nothing copied.
 */
function withForkedJournal(insert: SQL, fork: ForkOf): SQL {
  const replaced = fork.replace;
  const payload = replaced
    ? sql`CASE WHEN s.kind = 'result' AND s.payload->>'call_id' = ${replaced.callId}
        THEN jsonb_set(s.payload, '{content}', to_jsonb(${storable(replaced.content)}::text)) ELSE s.payload END`
    : sql`s.payload`;
  const extra = JSON.stringify(storable(fork.extra).map((r, i) => ({ n: i + 1, ...r })));
  return sql`
    WITH ins AS (${insert}),
    copied AS (
      INSERT INTO job_journal (job_id, seq, epoch, kind, payload)
      SELECT ins.id, s.seq, 0, s.kind, ${payload}
      FROM ins, job_journal s WHERE s.job_id = ${fork.jobId}::uuid AND s.seq <= ${fork.step}::int
      UNION ALL
      SELECT ins.id, ${fork.step}::int + r.n, 0, r.kind, r.payload
      FROM ins, jsonb_to_recordset(${extra}::jsonb) AS r(n int, kind text, payload jsonb)
    )
    SELECT * FROM ins`;
}

/**
 * A body's admission fields as the insert statements take them (null: not given). `priority`:
 * the body's, else its agent's default, else 0.
 */
function admissionOf(body: CreateJobBody, agent: ResolvedAgent | undefined) {
  return {
    priority: body.priority ?? agent?.priority ?? 0,
    delay_s: body.delay_s ?? null,
    run_at: body.run_at ?? null,
    ttl_s: body.ttl_s ?? null,
    concurrency_key: body.concurrency_key ?? null,
  };
}

/** run_at from `delay_s` (from the statement's now(), Postgres' clock) or the body's `run_at`. */
function runAtSql(delay: SQL, runAt: SQL): SQL {
  return sql`CASE WHEN ${delay} IS NOT NULL THEN now() + make_interval(secs => ${delay}) ELSE ${runAt} END`;
}

/** expires_at: ttl_s after the job becomes runnable (its run_at, else the submit). */
function expiresAtSql(delay: SQL, runAt: SQL, ttl: SQL): SQL {
  return sql`CASE WHEN ${ttl} IS NOT NULL THEN GREATEST(now(), coalesce(${runAtSql(delay, runAt)}, now())) + make_interval(secs => ${ttl}) END`;
}

/** What a job row runs: its agent version's model and tools, else the body's. */
function runsWith(body: CreateJobBody, agent: ResolvedAgent | undefined): { model: string | null; tools: string[] } {
  return agent ? { model: agent.model, tools: agent.tools } : { model: body.model ?? null, tools: body.tools ?? [] };
}

/** One job of a batch, as submitJobs resolved it: its id, body, agent and idempotency hash. */
export interface BatchItem {
  id: string;
  body: CreateJobBody;
  agent?: ResolvedAgent;
  /** The idempotency key's request hash (null: the body has no key). */
  requestHash: string | null;
  /** A replay's rerun (POST /v1/replays): a fork of `jobId` from step 0, made by replay `replayId`. */
  rerunOf?: { jobId: string; replayId: string };
}

/** How createJobs refuses a batch: nothing was created. `index` names the item at fault. */
export type BatchRefusal =
  | { kind: "mismatch"; index: number }
  | { kind: "queue_full"; fresh: number; maxQueued: number }
  | { kind: "budget"; refusal: BudgetRefusal };

/**
 * The statement aborts itself (a cast of this marker to int fails) when its INSERT skipped a row
 * of an idempotency key the snapshot did not show: a concurrent request committed that key
 * between the snapshot and the insert. Aborting rolls back every row of the batch, so the batch
 * stays all-or-nothing, and the retry's new snapshot sees that request's job as a replay.
 */
const RACE_MARKER = "ear_batch_idempotency_race";
const RACE_ATTEMPTS = 3;

/** The server's own error (SQLSTATE 22P02, the failed cast), not a wrapper whose text lists the parameters. */
function isRaceAbort(err: unknown): boolean {
  type Link = { code?: unknown; message?: unknown; cause?: unknown };
  for (let e = err as Link | null | undefined, depth = 0; e && depth < 5; depth++) {
    if (e.code === "22P02" && typeof e.message === "string" && e.message.includes(RACE_MARKER)) return true;
    e = e.cause as typeof e;
  }
  return false;
}

/**
 * Insert a batch of jobs in one statement, in order, or none of them. An item whose idempotency
 * key this tenant already used answers that job (a different request hash refuses the whole
 * batch as a mismatch); the others are inserted only if all of them fit under `maxQueued` (> 0)
 * beside the tenant's queued jobs, with the same READ COMMITTED caveat as createJob. Items
 * arrive as one jsonb parameter (jsonb_to_recordset), so the statement's size does not grow
 * with parameters. Rows get created_at = now() + their index in µs: one statement's now() is
 * one instant, and claims order by created_at, so this keeps the batch's order as submit order.
 * Keys must be distinct within the batch (submitJobs refuses a repeat).
 */
export async function createJobs(
  db: Db,
  tenantId: string,
  items: BatchItem[],
  opts: { maxQueued?: number } = {},
): Promise<CreatedJob[] | BatchRefusal> {
  const maxQueued = opts.maxQueued && opts.maxQueued > 0 ? opts.maxQueued : 0;
  const defaultTimeoutMs = jobs.timeoutMs.default as number;
  const rows = items.map(({ id, body, agent, requestHash, rerunOf }, ord) => ({
    ord,
    id,
    conversation_id: body.conversation_id ?? null,
    input: body.input,
    ...runsWith(body, agent),
    metadata: body.metadata ?? {},
    idempotency_key: body.idempotency_key ?? null,
    request_hash: requestHash,
    agent_name: agent?.name ?? null,
    agent_version: agent?.version ?? null,
    timeout_ms: agent?.timeoutMs ?? defaultTimeoutMs,
    ...admissionOf(body, agent),
    forked_from_job_id: rerunOf?.jobId ?? null,
    replay_id: rerunOf?.replayId ?? null,
    limits: body.limits ?? null,
  }));
  const statement = sql`
    WITH item AS (
      SELECT * FROM jsonb_to_recordset(${JSON.stringify(rows)}::jsonb) AS i(ord int, id uuid, conversation_id text,
        input jsonb, model text, tools jsonb, metadata jsonb, idempotency_key text, request_hash text,
        agent_name text, agent_version int, timeout_ms int, priority int, delay_s int, run_at timestamptz, ttl_s int,
        concurrency_key text, forked_from_job_id uuid, replay_id uuid, limits jsonb)
    ),
    existing AS (
      SELECT i.ord AS batch_ord, j.* FROM item i JOIN jobs j ON j.tenant_id = ${tenantId} AND j.idempotency_key = i.idempotency_key
    ),
    fresh AS (SELECT i.* FROM item i WHERE NOT EXISTS (SELECT 1 FROM existing e WHERE e.batch_ord = i.ord)),
    gate AS (
      SELECT
        (SELECT min(i.ord) FROM existing e JOIN item i ON i.ord = e.batch_ord
          WHERE e.request_hash IS NOT NULL AND e.request_hash IS DISTINCT FROM i.request_hash) AS mismatch,
        (SELECT count(*) FROM fresh) AS fresh,
        ${queueFitsSql(tenantId, maxQueued, sql`(SELECT count(*) FROM fresh)`)} AS fits,
        ${overBudgetSql(tenantId)} AS over_budget
    ),
    ins AS (
      INSERT INTO jobs (id, tenant_id, conversation_id, input, model, tools, metadata, idempotency_key, request_hash,
        agent_name, agent_version, timeout_ms, created_at, priority, run_at, expires_at, concurrency_key,
        forked_from_job_id, forked_from_step, recovery_reason, replay_id, limits)
      SELECT f.id, ${tenantId}, f.conversation_id, f.input, f.model, f.tools, f.metadata, f.idempotency_key,
        f.request_hash, f.agent_name, f.agent_version, f.timeout_ms, now() + f.ord * interval '1 microsecond',
        f.priority, ${runAtSql(sql`f.delay_s`, sql`f.run_at`)}, ${expiresAtSql(sql`f.delay_s`, sql`f.run_at`, sql`f.ttl_s`)},
        f.concurrency_key, f.forked_from_job_id, CASE WHEN f.forked_from_job_id IS NOT NULL THEN 0 END,
        CASE WHEN f.forked_from_job_id IS NOT NULL THEN ${FORK_REASON} END, f.replay_id,
        CASE WHEN jsonb_typeof(f.limits) = 'object' THEN f.limits END
      FROM fresh f, gate g WHERE g.mismatch IS NULL AND g.fits AND NOT g.over_budget
      ORDER BY f.ord
      ON CONFLICT (tenant_id, idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING
      RETURNING *
    ),
    outcome AS (
      SELECT g.mismatch, g.fresh, g.fits, g.over_budget,
        CASE WHEN g.mismatch IS NULL AND g.fits AND NOT g.over_budget AND (SELECT count(*) FROM ins) < g.fresh
          THEN (${RACE_MARKER} || (SELECT count(*) FROM ins)::text)::int END AS raced
      FROM gate g
    )
    SELECT o.mismatch AS batch_mismatch, o.fresh AS batch_fresh, o.fits AS batch_fits, o.over_budget AS batch_over_budget,
      o.raced AS batch_raced, r.*
    FROM outcome o LEFT JOIN (SELECT NULL::int AS batch_ord, ins.* FROM ins UNION ALL SELECT * FROM existing) r ON true`;
  for (let attempt = 1; ; attempt++) {
    let result: Record<string, unknown>[];
    try {
      result = resultRows<Record<string, unknown>>(await db.execute(statement));
    } catch (err) {
      if (attempt < RACE_ATTEMPTS && isRaceAbort(err)) continue;
      throw err;
    }
    const head = result[0];
    if (!head) throw new Error("batch insert returned no outcome row");
    if (head.batch_mismatch !== null) return { kind: "mismatch", index: Number(head.batch_mismatch) };
    if (head.batch_fits !== true) return { kind: "queue_full", fresh: Number(head.batch_fresh), maxQueued };
    // A batch of replays only creates nothing and spends nothing: it is answered over a budget too.
    if (head.batch_over_budget === true && Number(head.batch_fresh) > 0) {
      const refusal = await budgetRefusal(db, tenantId);
      if (refusal) return { kind: "budget", refusal };
      // Null: the day turned (or the budget was raised) since the statement; the next try decides.
      if (attempt < RACE_ATTEMPTS) continue;
      throw new Error("a tenant's budget state changed under every attempt of a batch insert");
    }
    const byId = new Map<string, JobRow>();
    const byOrd = new Map<number, JobRow>();
    for (const raw of result) {
      if (raw.id === null || raw.id === undefined) continue;
      const job = jobFromRow(raw);
      if (raw.batch_ord === null) byId.set(job.id, job);
      else byOrd.set(Number(raw.batch_ord), job);
    }
    return items.map((item, ord) => {
      const existing = byOrd.get(ord);
      if (existing) return { job: existing, created: false };
      const job = byId.get(item.id);
      if (!job) throw new Error(`batch item ${ord} neither inserted nor found`);
      return { job, created: true };
    });
  }
}

/**
 * The job `body.idempotency_key` already made, answered as a replay (or refused as a mismatch),
 * or null when the key is unused. For a submit that cannot create its job any more (its agent
 * was archived since): a retry of a request that did create one still gets that job.
 */
export async function findReplay(
  db: Db,
  tenantId: string,
  body: CreateJobBody,
  opts: { requestHash?: string } = {},
): Promise<CreatedJob | null> {
  if (!body.idempotency_key) return null;
  const existing = await findByIdempotencyKey(db, tenantId, body.idempotency_key);
  if (!existing) return null;
  return idempotentReplay(existing, opts.requestHash ?? (await jobRequestHash(body)));
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
  opts: { state?: JobState; scheduleId?: string; limit: number; cursor?: ListCursor },
): Promise<{ jobs: JobRow[]; nextCursor: string | null }> {
  const conds = [eq(jobs.tenantId, tenantId)];
  if (opts.state) conds.push(eq(jobs.state, opts.state));
  if (opts.scheduleId) conds.push(eq(jobs.scheduleId, opts.scheduleId));
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
