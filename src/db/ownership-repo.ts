/**
 * Owner writes on a job, each fenced by the owner's identity. Every function returns whether its
 * conditional UPDATE hit the row: `false` means "you are no longer the owner" and the caller must
 * stop acting under that identity. The claim leaves the job `queued` with an owner; only the
 * started CAS makes it `running`. That CAS is the recovery boundary: before it a claim may be
 * released and claimed again, after it the job is never run again (docs/architecture.md).
 */
import { sql } from "drizzle-orm";
import { RECOVERY_DEFAULTS } from "../contracts/agent";
import type { JobErrorCode } from "../contracts/errors";
import type { JobError } from "../contracts/job";
import { storable } from "../contracts/text";
import type { Claim, ExecutionIdentity } from "../domain/identity";
import type { TimingFacts } from "../domain/timing";
import type { Db } from "./client";
import { isUniqueViolation, resultCount, resultRows, retryOnDeadlock } from "./client";
import { held } from "./schema";

/**
 * The statements of every run's lifecycle (the claims, the started CAS, the heartbeat, the
 * terminal write) open with their name as a comment. Their text never varies, so a host on a
 * direct connection sends them as named prepared statements, planned once per connection
 * (sandbox-host/prepared-statements.ts): planning was ~40 % of Postgres' time on them
 * (docs/claims.md). Any other driver just sees a comment. The admission claim is named per
 * batch size and reserve (`ear_claim_poll_8`, `ear_claim_poll_8_r1`): both are part of its text.
 */
export const LIFECYCLE_STATEMENT = /^\/\* (ear_[a-z0-9_]+) \*\//;
const named = (
  name:
    | `ear_claim_poll_${number}`
    | `ear_claim_poll_${number}_r${number}`
    | "ear_start"
    | "ear_heartbeat"
    | "ear_finish",
) => sql.raw(`/* ${name} */ `);

/**
 * The claimable condition: queued, no owner, never claimed into an execution. Every claim
 * repeats it in its UPDATE's WHERE (so the claim stays a CAS) and the ready-index rebuild selects
 * by it. `table` qualifies the columns when the statement joins (`jobs`, an alias); it is always
 * a name written in this package, never input. The `jobs_ready_idx` predicate (schema.ts) and
 * the `ear_notify_ready` trigger (drizzle/0001) state the shorter "queued with no owner" in SQL.
 */
export function claimable(table?: string) {
  const c = table ? `${table}.` : "";
  return sql.raw(
    `${c}state = 'queued' AND ${c}owner IS NULL AND ${c}claimed_at IS NULL AND ${c}execution_id IS NULL AND ${c}execution_started_at IS NULL`,
  );
}

/**
 * Due and not expired: the admission conditions on top of `claimable` (a job queued with a later
 * `run_at` waits for it; one past its `expires_at` is the expiry sweep's, never claimed). A job
 * that has started once (a resumed one, back in the queue after a wait) no longer expires: its
 * ttl was about its first start.
 */
export function runnable(table: string) {
  return sql.raw(
    `(${table}.run_at IS NULL OR ${table}.run_at <= now()) AND (${table}.expires_at IS NULL OR ${table}.expires_at > now() OR ${table}.started_at IS NOT NULL)`,
  );
}

const sqlLiteral = (s: string) => `'${s.replaceAll("'", "''")}'`;

/** A job error as a jsonb value, for the statements that end a job in SQL; the code is from the closed set. */
export function jobErrorSql(code: JobErrorCode, message: string) {
  return sql.raw(`jsonb_build_object('code', ${sqlLiteral(code)}, 'message', ${sqlLiteral(message)})`);
}

/** The error of a job cancelled before it started (by the gateway, its claimant or the reaper). */
export const CANCELLED_BEFORE_START = jobErrorSql("cancelled", "cancelled before it started");

// The identity types live in src/domain/identity.ts; re-exported for this module's callers.
export type { ExecutionIdentity };

/** How often a claim refused by a key or tenant-slot guard (a racing claimer won it) is tried again. */
const CLAIM_RACE_ATTEMPTS = 3;

/**
 * Claim up to `tokens.length` jobs straight from Postgres, in admission order (docs/claims.md,
 * "Admission"): every host's one claim statement, whether the ready index woke it, NOTIFY did, or
 * Redis is gone (so the fallback is as fair as the index path: both are this statement).
 *
 * - Runnable: claimable, `run_at` passed, `expires_at` not passed, older than `olderThanMs`
 *   (the sweep's age), and its concurrency key (if any) held by none of its tenant's jobs.
 * - Inside a tenant: priority, then submit order; of a key only its first job.
 * - Across tenants: the k-th job a tenant would get now is ranked (held + k) / weight, held being
 *   the jobs it already has claimed or running fleet-wide; lowest rank first, then submit order.
 *   That is weighted round-robin over the tenants with runnable work, with the fleet as it is.
 * - A tenant with `max_running` N gets at most N − held; each claimed job takes a free slot
 *   number 1..N.
 * - `reserved` of the claim's slots go only to newcomers: the first `tokens.length − reserved`
 *   jobs in this order are taken whoever's they are, and past them only the first job of a
 *   tenant holding no job fleet-wide. So a host keeps that many slots free for a tenant that
 *   arrives after another filled the fleet with long jobs: it starts at once instead of when a
 *   long job ends (docs/claims.md "Admission", item 5).
 *
 * Racing claimers: each served tenant's candidates are locked SKIP LOCKED as they are read
 * (like the first-come claim), so concurrent claimers take different jobs rather than all
 * picking the same ones and losing them at the lock. Two claimers whose snapshots both
 * saw a key free, or the same slot numbers free, collide in the unique indexes jobs_held_key_uq /
 * jobs_held_slot_uq instead of both winning; the loser's statement fails whole (nothing claimed)
 * and is run again with a new snapshot, which sees the winner.
 */
export async function claimFromPostgres(
  db: Db,
  host: string,
  tokens: string[],
  olderThanMs = 0,
  reserved = 0,
): Promise<Claim[]> {
  if (tokens.length === 0) return [];
  if (!Number.isInteger(reserved) || reserved < 0) throw new Error(`claimFromPostgres: bad reserve ${reserved}`);
  for (let attempt = 1; ; attempt++) {
    try {
      return await claimAdmitted(db, host, tokens, olderThanMs, reserved);
    } catch (err) {
      if (attempt >= CLAIM_RACE_ATTEMPTS || !isUniqueViolation(err)) throw err;
    }
  }
}

async function claimAdmitted(
  db: Db,
  host: string,
  tokens: string[],
  olderThanMs: number,
  reserved: number,
): Promise<Claim[]> {
  const want = tokens.length;
  // B is written into the text (and the name): sent as a parameter, the LIMITs made the generic
  // plan lose the planner's cost test and a named claim was re-planned on every execution
  // (docs/claims.md, "Cost of the claim statement"). An integer, never input. So is the reserve.
  const limit = sql.raw(String(want));
  const name = reserved > 0 ? (`ear_claim_poll_${want}_r${reserved}` as const) : (`ear_claim_poll_${want}` as const);
  // With a reserve, newcomers (no job held anywhere) come first in the tenant walk: otherwise B
  // tenants that already hold jobs but rank earlier (a higher weight) could fill the walk, and a
  // reserved slot would stay empty while a newcomer waits. Without one the walk is as it was.
  // The flag is a column both ORDER BYs name: the same order by name lets the walk stop after B
  // tenants; the same expression written twice made Postgres probe every tenant and sort again.
  const holdsColumn = sql.raw(reserved > 0 ? "coalesce(h.n, 0) > 0 AS holds, " : "");
  const newcomersFirst = sql.raw(reserved > 0 ? "holds, " : "");
  const newcomersFirstOuter = sql.raw(reserved > 0 ? "o.holds, " : "");
  // Which ranked jobs may be picked: the first B − reserve in the claim's order, whoever's they
  // are, and past them only a newcomer's first job. So a tenant alone on an idle host gets
  // B − reserve (its own first job counts as one of them), and the reserve fills only with
  // tenants that hold nothing. Without a reserve every ranked job may be.
  const open = want - reserved;
  // The k-th job of a capped tenant takes its k-th free slot number 1..max_running.
  const slotOf = sql.raw(`CASE WHEN max_running > 0 THEN (SELECT s FROM generate_series(1, max_running) s
            WHERE NOT (s = ANY (slots)) ORDER BY s OFFSET k - 1 LIMIT 1) END`);
  const pickable = sql`SELECT id, (held + k)::float8 / weight AS turn, created_at, ${slotOf} AS slot
        FROM ranked WHERE (max_running = 0 OR held + k <= max_running)`;
  const picks =
    reserved > 0
      ? sql`SELECT * FROM (
          (${pickable} ORDER BY turn, created_at LIMIT ${sql.raw(String(Math.max(0, open)))})
          UNION (${pickable} AND held = 0 AND k = 1)
        ) u ORDER BY turn, created_at LIMIT ${limit}`
      : sql`${pickable} ORDER BY turn, created_at LIMIT ${limit}`;
  // What makes a job of tenant t.id takeable now (both probes below repeat it). The probes order
  // as jobs_admission_idx does (priority is never null: NULLS LAST only lets the index serve).
  const admissible = sql`j.tenant_id = t.id AND ${claimable("j")} AND ${runnable("j")}
    AND j.created_at <= now() - make_interval(secs => ${olderThanMs / 1000})
    AND (j.concurrency_key IS NULL OR NOT EXISTS (SELECT 1 FROM jobs o
      WHERE o.tenant_id = j.tenant_id AND o.concurrency_key = j.concurrency_key AND ${held("o")}))`;
  const rows = resultRows<{ id: string; epoch: number; token: string }>(
    await db.execute(sql`${named(name)}
      WITH held AS (
        SELECT tenant_id, count(*)::int AS n,
          coalesce(array_agg(tenant_slot) FILTER (WHERE tenant_slot IS NOT NULL), '{}') AS slots
        FROM jobs WHERE ${held()} GROUP BY tenant_id
      ), served AS (
        -- The first B tenants with takeable work, in the order of their next job's rank: only
        -- they can fill B slots (any other tenant's first job ranks after theirs). Walked in
        -- order and stopped at B, so tenants further down are never probed.
        SELECT o.* FROM (
          SELECT t.id, t.weight, t.max_running, coalesce(h.n, 0) AS held, coalesce(h.slots, '{}') AS slots,
            (coalesce(h.n, 0) + 1)::float8 / t.weight AS first_turn, ${holdsColumn}random() AS tie
          FROM tenants t LEFT JOIN held h ON h.tenant_id = t.id
          WHERE t.max_running = 0 OR coalesce(h.n, 0) < t.max_running
          ORDER BY ${newcomersFirst}first_turn, tie
        ) o
        CROSS JOIN LATERAL (SELECT 1 FROM jobs j, (SELECT o.id) AS t(id) WHERE ${admissible}
          ORDER BY j.priority DESC NULLS LAST, j.created_at LIMIT 1) w
        ORDER BY ${newcomersFirstOuter}o.first_turn, o.tie
        LIMIT ${limit}
      ), cand AS (
        -- Each served tenant's first B takeable jobs, locked as they are read and skipping what
        -- a concurrent claim holds (as the first-come claim did): racing claimers take
        -- different jobs instead of all picking the same ones.
        SELECT s.id AS tenant_id, s.weight, s.max_running, s.held, s.slots, s.tie,
          c.id, c.created_at, c.priority, c.concurrency_key
        FROM served s
        CROSS JOIN LATERAL (
          SELECT j.id, j.created_at, j.priority, j.concurrency_key FROM jobs j, (SELECT s.id) AS t(id)
          WHERE ${admissible}
          ORDER BY j.priority DESC NULLS LAST, j.created_at
          LIMIT ${limit}
          FOR UPDATE OF j SKIP LOCKED
        ) c
      ), heads AS (
        SELECT *, row_number() OVER (PARTITION BY tenant_id, concurrency_key ORDER BY priority DESC, created_at) AS in_key
        FROM cand
      ), ranked AS (
        SELECT *, row_number() OVER (PARTITION BY tenant_id ORDER BY priority DESC, created_at) AS k
        FROM heads WHERE concurrency_key IS NULL OR in_key = 1
      ), picked AS (
        ${picks}
      ), numbered AS (
        SELECT id, slot, row_number() OVER (ORDER BY turn, created_at) AS n FROM picked
      ), toks AS (
        SELECT t, n FROM unnest(string_to_array(${tokens.join(",")}, ',')::uuid[]) WITH ORDINALITY AS u(t, n)
      )
      UPDATE jobs j SET owner = ${host}, claimed_at = now(), epoch = j.epoch + 1, token = toks.t,
        tenant_slot = numbered.slot
      FROM numbered JOIN toks USING (n)
      WHERE j.id = numbered.id AND ${claimable("j")}
      RETURNING j.id, j.epoch, j.token`),
  );
  return rows.map((r) => ({ jobId: r.id, epoch: Number(r.epoch), token: r.token }));
}

/** Of these job ids, the ones still claimable (the claimer drops ready-index entries of the others). */
export async function stillClaimable(db: Db, jobIds: string[]): Promise<Set<string>> {
  if (jobIds.length === 0) return new Set();
  const rows = resultRows<{ id: string }>(
    await db.execute(sql`
      SELECT id FROM jobs WHERE id = ANY(string_to_array(${jobIds.join(",")}, ',')::uuid[]) AND ${claimable()}`),
  );
  return new Set(rows.map((r) => r.id));
}

/**
 * The started CAS for several claims in one statement (a host coalesces starts that are ready at
 * the same moment). Every row is checked against its own full claim identity (job, host, epoch,
 * token; still queued, never started, no cancel requested), its host read from the identity like
 * the rest, so a stale one in the batch simply misses; each one that hits gets its `executions`
 * row in the same statement, carrying the claim token (the gateway derives the execution's ingest
 * key from it). `started_at` keeps the first execution's start: an execution resuming a waiting
 * job is not the job's start (its latency derivation counts from the first).
 * Returns the execution ids that started.
 */
export async function markStartedMany(db: Db, ids: ExecutionIdentity[]): Promise<Set<string>> {
  if (ids.length === 0) return new Set();
  // Each column as one comma-joined parameter: uuids, numbers and host ids (the id character
  // set, host-config.ts) hold no comma.
  const col = (f: (r: ExecutionIdentity) => string | number) => ids.map(f).join(",");
  const rows = resultRows<{ id: string }>(
    await db.execute(sql`${named("ear_start")}
      WITH mine AS (
        SELECT * FROM unnest(
          string_to_array(${col((r) => r.jobId)}, ',')::uuid[],
          string_to_array(${col((r) => r.executionId)}, ',')::uuid[],
          string_to_array(${col((r) => r.epoch)}, ',')::int[],
          string_to_array(${col((r) => r.token)}, ',')::uuid[],
          string_to_array(${col((r) => r.host)}, ',')::text[]
        ) AS m(job_id, execution_id, epoch, token, host)
      ), started AS (
        UPDATE jobs SET state = 'running', execution_id = mine.execution_id, execution_started_at = now(),
          started_at = coalesce(jobs.started_at, now()), heartbeat_at = now(),
          deadline_at = now() + make_interval(secs => jobs.timeout_ms / 1000.0)
        FROM mine
        WHERE jobs.id = mine.job_id AND jobs.state = 'queued' AND jobs.owner = mine.host
          AND jobs.claimed_at IS NOT NULL AND jobs.epoch = mine.epoch AND jobs.token = mine.token
          AND jobs.execution_id IS NULL AND jobs.execution_started_at IS NULL AND jobs.cancel_requested_at IS NULL
        RETURNING jobs.id, jobs.epoch, jobs.execution_id, jobs.token, jobs.owner
      )
      INSERT INTO executions (id, job_id, host, epoch, token)
      SELECT started.execution_id, started.id, started.owner, started.epoch, started.token FROM started
      RETURNING id`),
  );
  return new Set(rows.map((r) => r.id));
}

export const fence = (id: ExecutionIdentity) => sql`
  id = ${id.jobId} AND owner = ${id.host} AND epoch = ${id.epoch} AND token = ${id.token}
  AND execution_id = ${id.executionId} AND state = 'running'`;

/**
 * Timing facts a run has observed but not yet written, as `performance.now()` instants on the
 * host. They ride on the next fenced write of the row that happens anyway (the heartbeat, or the
 * terminal write for a run shorter than a heartbeat) instead of costing a statement each: a
 * separate `UPDATE … SET prepared_at` and `… first_output_at` per run were two of the five
 * statements of a run's whole lifecycle (docs/claims.md). Postgres' clock stays the only clock in
 * the row: a fact is written as `now() - (time since the instant)`, measured when the statement
 * is built, so its error is the time the statement takes to reach Postgres (sub-millisecond on
 * a LAN), never host clock skew. It is clamped to no earlier than the start (and, for the first
 * output, the preparation), and a fact already in the row is never overwritten.
 */
export type PendingFacts = Partial<Record<TimingPoint, number>>;

/** Milliseconds since each pending instant, or null; what a statement sends for the facts. */
export function factAges(facts: PendingFacts | undefined, now: number): { p: number | null; f: number | null } {
  const age = (t: number | undefined) => (t === undefined ? null : Math.max(0, now - t));
  return { p: age(facts?.prepared_at), f: age(facts?.first_output_at) };
}

/** The SET clauses writing the pending facts carried by `m.p_ago` / `m.f_ago` (ms, or NULL). */
export const FACTS_SET = sql.raw(`
  prepared_at = COALESCE(jobs.prepared_at, CASE WHEN m.p_ago IS NOT NULL
    THEN GREATEST(jobs.execution_started_at, now() - m.p_ago * interval '1 millisecond') END),
  first_output_at = COALESCE(jobs.first_output_at, CASE WHEN m.f_ago IS NOT NULL
    THEN GREATEST(jobs.execution_started_at, COALESCE(jobs.prepared_at, now() - m.p_ago * interval '1 millisecond'),
      now() - m.f_ago * interval '1 millisecond') END)`);

/** A run a host holds, with the timing facts it may carry. */
export type HeldRun = ExecutionIdentity & { facts?: PendingFacts };

/**
 * One statement for every run a host holds; returns the execution ids that are still ours. Each
 * run's full identity (execution id, epoch, token, job, host) is checked, like every owner write.
 * A run's pending timing facts (`facts`) are written in the same statement, under the same fence.
 */
export async function heartbeat(db: Db, runs: HeldRun[]): Promise<Set<string>> {
  if (runs.length === 0) return new Set();
  const now = performance.now();
  const rows = resultRows<{ execution_id: string }>(
    await db.execute(sql`${named("ear_heartbeat")}
      UPDATE jobs SET heartbeat_at = now(), ${FACTS_SET}
      FROM jsonb_to_recordset(${JSON.stringify(
        runs.map((r) => ({
          job_id: r.jobId,
          execution_id: r.executionId,
          epoch: r.epoch,
          token: r.token,
          host: r.host,
          ...agesJson(factAges(r.facts, now)),
        })),
      )}::jsonb) AS m(job_id uuid, execution_id uuid, epoch int, token uuid, host text, p_ago float8, f_ago float8)
      WHERE jobs.id = m.job_id AND jobs.execution_id = m.execution_id AND jobs.epoch = m.epoch
        AND jobs.token = m.token AND jobs.owner = m.host AND jobs.state = 'running'
      RETURNING jobs.execution_id`),
  );
  return new Set(rows.map((r) => r.execution_id));
}

const agesJson = (a: { p: number | null; f: number | null }) => ({ p_ago: a.p, f_ago: a.f });

export type TimingPoint = "prepared_at" | "first_output_at";

export type FinalOutcome =
  /** `outputJson`: the answer parsed as JSON, when the agent's response_format validated it. */
  | { state: "completed"; output: string; outputJson?: unknown }
  | { state: "failed"; error: JobError; output?: string | null }
  | { state: "cancelled"; output?: string | null };

/** What one terminal write learned. */
export interface FinishResult {
  written: boolean;
  /** Seconds from a durable cancel request to the terminal write (null: none was requested). */
  cancelLagSeconds: number | null;
  /** The row's five timestamps after the write (null when it missed): the phase histograms' input. */
  facts: TimingFacts | null;
}

/** A raw statement's timestamp (drivers differ: a Date, or Postgres' text form) as a Date. */
const asDate = (v: Date | string | null) => (v === null || v instanceof Date ? v : new Date(v));

/** One run's terminal write in a batch. */
export interface Finish {
  id: ExecutionIdentity;
  outcome: FinalOutcome;
  facts?: PendingFacts;
  /** The seq of the execution's last event before its terminal one (`executions.events_through`). */
  eventsThrough?: number;
}

/**
 * The terminal writes of several runs in one statement (a host group-commits runs that end at
 * the same moment, like the started CAS). Every row is checked against its own full execution
 * identity (job, host, epoch, token, execution id, `running`): a stale one in the batch simply misses while
 * the others land. Each hit also closes its `executions` row and writes the run's pending timing
 * facts. Returns one result per input, in order.
 */
export async function finishJobsMany(db: Db, batch: Finish[]): Promise<FinishResult[]> {
  if (batch.length === 0) return [];
  const now = performance.now();
  const rows = resultRows<{
    id: string;
    cancel_lag: string | number | null;
    created_at: Date | string;
    started_at: Date | string | null;
    prepared_at: Date | string | null;
    first_output_at: Date | string | null;
    finished_at: Date | string | null;
  }>(
    // Retried on deadlock: the batch ends children of several parents (the resume trigger).
    await retryOnDeadlock(() =>
      db.execute(sql`${named("ear_finish")}
    WITH done AS (
      UPDATE jobs SET state = m.state, output = m.output, error = m.error, output_json = m.output_json,
        finished_at = now(), checkpoint = NULL, ${FACTS_SET}
      FROM jsonb_to_recordset(${JSON.stringify(
        batch.map(({ id, outcome: produced, facts, eventsThrough }) => {
          // Model text: a NUL or a lone surrogate in it would fail the whole batch's statement.
          const outcome = storable(produced);
          return {
            job_id: id.jobId,
            execution_id: id.executionId,
            epoch: id.epoch,
            token: id.token,
            host: id.host,
            state: outcome.state,
            output: "output" in outcome ? (outcome.output ?? null) : null,
            error: outcome.state === "failed" ? outcome.error : null,
            output_json: outcome.state === "completed" && outcome.outputJson !== undefined ? outcome.outputJson : null,
            events_through: eventsThrough ?? null,
            ...agesJson(factAges(facts, now)),
          };
        }),
      )}::jsonb) AS m(job_id uuid, execution_id uuid, epoch int, token uuid, host text, state text, output text,
                      error jsonb, output_json jsonb, p_ago float8, f_ago float8, events_through int)
      WHERE jobs.id = m.job_id AND jobs.owner = m.host AND jobs.epoch = m.epoch AND jobs.token = m.token
        AND jobs.execution_id = m.execution_id AND jobs.state = 'running'
      RETURNING jobs.execution_id, jobs.state, extract(epoch FROM jobs.finished_at - jobs.cancel_requested_at) AS cancel_lag,
        jobs.created_at, jobs.started_at, jobs.prepared_at, jobs.first_output_at, jobs.finished_at, m.events_through
    )
    UPDATE executions SET finished_at = now(), outcome = done.state, events_through = done.events_through
    FROM done WHERE executions.id = done.execution_id
    RETURNING executions.id, done.cancel_lag, done.created_at, done.started_at, done.prepared_at,
      done.first_output_at, done.finished_at`),
    ),
  );
  const byExecution = new Map(rows.map((r) => [r.id, r]));
  return batch.map(({ id }) => {
    const r = byExecution.get(id.executionId);
    if (!r) return { written: false, cancelLagSeconds: null, facts: null };
    const lag = r.cancel_lag;
    return {
      written: true,
      cancelLagSeconds: lag === null || lag === undefined ? null : Math.max(0, Number(lag)),
      facts: {
        created_at: asDate(r.created_at),
        started_at: asDate(r.started_at),
        prepared_at: asDate(r.prepared_at),
        first_output_at: asDate(r.first_output_at),
        finished_at: asDate(r.finished_at),
      },
    };
  });
}

/**
 * The owner takes every input still `requested`, in arrival order, marking it `accepted` by this
 * execution. Fenced: only while the job is running under this identity.
 */
export async function acceptPendingInputs(
  db: Db,
  id: ExecutionIdentity,
): Promise<Array<{ id: string; content: string }>> {
  const rows = resultRows<{ id: string; content: string; seq: string | number }>(
    await db.execute(sql`
      UPDATE job_inputs SET status = 'accepted', accepted_at = now(), execution_id = ${id.executionId}
      WHERE job_id = ${id.jobId} AND status = 'requested'
        AND EXISTS (SELECT 1 FROM jobs WHERE ${fence(id)})
      RETURNING id, content, seq`),
  );
  return rows.sort((a, b) => Number(a.seq) - Number(b.seq)).map((r) => ({ id: r.id, content: r.content }));
}

/** Inputs included in a model turn that is about to start. */
export async function markInputsApplied(db: Db, id: ExecutionIdentity, inputIds: string[]): Promise<number> {
  if (inputIds.length === 0) return 0;
  const result = await db.execute(sql`
    UPDATE job_inputs SET status = 'applied', applied_at = now()
    WHERE id = ANY(string_to_array(${inputIds.join(",")}, ',')::uuid[]) AND execution_id = ${id.executionId}
      AND status = 'accepted' AND EXISTS (SELECT 1 FROM jobs WHERE ${fence(id)})`);
  return resultCount(result);
}

/**
 * A claim whose job was asked to cancel before it started: the claimant ends it `cancelled`
 * with the claim part of its identity (it never starts, so the row names no execution).
 */
export async function cancelClaim(
  db: Db,
  c: Pick<ExecutionIdentity, "jobId" | "host" | "epoch" | "token">,
): Promise<boolean> {
  const result = await db.execute(sql`
    UPDATE jobs SET state = 'cancelled', finished_at = now(), error = ${CANCELLED_BEFORE_START}
    WHERE id = ${c.jobId} AND state = 'queued' AND owner = ${c.host} AND epoch = ${c.epoch} AND token = ${c.token}
      AND execution_id IS NULL AND cancel_requested_at IS NOT NULL`);
  return resultCount(result) === 1;
}

/** Running jobs of this host (by job id) whose cancel was requested durably. One query for all. */
export async function cancelRequested(db: Db, jobIds: string[]): Promise<Set<string>> {
  if (jobIds.length === 0) return new Set();
  const rows = resultRows<{ id: string }>(
    await db.execute(sql`
      SELECT id FROM jobs WHERE id = ANY(string_to_array(${jobIds.join(",")}, ',')::uuid[])
        AND cancel_requested_at IS NOT NULL`),
  );
  return new Set(rows.map((r) => r.id));
}

/**
 * The sandbox cleanup fence on the job row: set (as the running owner) before a sandbox is
 * created, cleared by the same execution once the sandbox is gone. A row left with the fence set
 * names a sandbox some host still has to remove.
 */
export async function setCleanupPending(db: Db, id: ExecutionIdentity, pending: boolean): Promise<boolean> {
  const result = pending
    ? await db.execute(sql`UPDATE jobs SET cleanup_pending = true WHERE ${fence(id)}`)
    : await db.execute(sql`
        UPDATE jobs SET cleanup_pending = false
        WHERE id = ${id.jobId} AND execution_id = ${id.executionId} AND epoch = ${id.epoch} AND token = ${id.token}`);
  return resultCount(result) === 1;
}

/**
 * The input that answered an ask_user call, taken by the execution resuming from it: it becomes
 * the tool result, so it is applied here (not again as a user message by acceptPendingInputs).
 * Fenced like every owner write.
 */
export async function applyAnswerInput(db: Db, id: ExecutionIdentity, inputId: string): Promise<boolean> {
  const result = await db.execute(sql`
    UPDATE job_inputs SET status = 'applied', accepted_at = coalesce(accepted_at, now()), applied_at = now(),
      execution_id = ${id.executionId}
    WHERE id = ${inputId} AND job_id = ${id.jobId} AND status IN ('requested', 'accepted')
      AND EXISTS (SELECT 1 FROM jobs WHERE ${fence(id)})`);
  return resultCount(result) === 1;
}

/**
 * The agent's recovery settings for a job row aliased `j` joined to its version `v` (none: the
 * built-in default agent), with the schema's defaults (AgentRecoverySchema, src/contracts/agent.ts)
 * for a job without an agent or a version stored before the field existed. Here with the owner's
 * hand-off below; the reaper's `reapRuns` (reaper-repo.ts) asks the same of a silent run.
 */
export const RECOVERABLE =
  sql.raw(`coalesce(v.definition->'recovery'->>'on_host_loss', '${RECOVERY_DEFAULTS.on_host_loss}') = 'resume'
  AND j.recoveries < coalesce((v.definition->'recovery'->>'max_recoveries')::int, ${RECOVERY_DEFAULTS.max_recoveries})`);

/**
 * The SET clauses that hand a reaped or handed-off job (`due.outcome` 'recovered') to a new
 * execution: the claim and the execution cleared (what `claimable()` asks), epoch + 1, one more
 * recovery. Other outcomes keep the columns as they are.
 */
export const REQUEUE_SET = sql.raw(`
  owner = CASE WHEN due.outcome = 'recovered' THEN NULL ELSE jobs.owner END,
  claimed_at = CASE WHEN due.outcome = 'recovered' THEN NULL ELSE jobs.claimed_at END,
  token = CASE WHEN due.outcome = 'recovered' THEN NULL ELSE jobs.token END,
  execution_id = CASE WHEN due.outcome = 'recovered' THEN NULL ELSE jobs.execution_id END,
  execution_started_at = CASE WHEN due.outcome = 'recovered' THEN NULL ELSE jobs.execution_started_at END,
  heartbeat_at = CASE WHEN due.outcome = 'recovered' THEN NULL ELSE jobs.heartbeat_at END,
  deadline_at = CASE WHEN due.outcome = 'recovered' THEN NULL ELSE jobs.deadline_at END,
  epoch = CASE WHEN due.outcome = 'recovered' THEN jobs.epoch + 1 ELSE jobs.epoch END,
  recoveries = CASE WHEN due.outcome = 'recovered' THEN jobs.recoveries + 1 ELSE jobs.recoveries END`);

/**
 * A host shutting down hands a run it could not finish within its grace to a new execution, at
 * once (no waiting for the lost bound): the same re-queue as a recovery (REQUEUE_SET: epoch + 1,
 * one more recovery), with `recovery_reason` 'host_shutdown', under the owner's full fence, when
 * the agent's `recovery` allows one more (RECOVERABLE) and no cancel was requested; its
 * execution ends `handed_off`. The run stopped at its last journaled step, so the new execution
 * continues from there. `not_allowed`: the row is still the caller's, and it should end the run
 * as before (failed `host_shutdown`); `not_owner`: it is not the caller's any more.
 */
export async function handOffRun(db: Db, id: ExecutionIdentity): Promise<"handed_off" | "not_allowed" | "not_owner"> {
  const rows = resultRows<{ outcome: string; handed: boolean }>(
    await db.execute(sql`
      WITH due AS (
        SELECT j.id, j.execution_id,
          CASE WHEN ${RECOVERABLE} AND j.cancel_requested_at IS NULL THEN 'recovered' ELSE 'refused' END AS outcome
        FROM jobs j
        LEFT JOIN agent_versions v ON v.tenant_id = j.tenant_id AND v.name = j.agent_name AND v.version = j.agent_version
        WHERE j.id = ${id.jobId} AND j.owner = ${id.host} AND j.epoch = ${id.epoch} AND j.token = ${id.token}
          AND j.execution_id = ${id.executionId} AND j.state = 'running'
        FOR UPDATE OF j
      ), handed AS (
        UPDATE jobs SET state = 'queued', ${REQUEUE_SET}, recovery_reason = 'host_shutdown'
        FROM due WHERE jobs.id = due.id AND due.outcome = 'recovered'
        RETURNING due.execution_id
      ), recorded AS (
        UPDATE executions SET finished_at = now(), outcome = 'handed_off'
        FROM handed WHERE executions.id = handed.execution_id
      )
      SELECT due.outcome, EXISTS (SELECT 1 FROM handed) AS handed FROM due`),
  );
  const [r] = rows;
  if (!r) return "not_owner";
  return r.handed ? "handed_off" : "not_allowed";
}
