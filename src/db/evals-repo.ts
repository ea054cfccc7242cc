/**
 * Evals (POST /v1/evals, docs/api.md "Evals"): the eval and its cases, their views with their
 * jobs' facts and the summary, and the scorers' work list (sandbox-host/evals/eval-scorer.ts).
 * The cases' jobs are inserted by createJobs (jobs-repo.ts) as a batch, before the eval.
 */
import { sql } from "drizzle-orm";
import type { EvalSummary } from "../contracts/eval";
import type { ChatMessage, JobError, JobState } from "../contracts/job";
import { type Db, resultRows } from "./client";
import { encodeCursor, type ListCursor } from "./jobs-repo";
import { FINAL_STATES_SQL } from "./schema";

export interface NewEvalCase {
  input: { messages: ChatMessage[] };
  expect: string | null;
  sourceJobId: string | null;
  jobId: string;
}

/** The eval and its cases in one statement (both or neither). */
export async function insertEval(
  db: Db,
  e: {
    id: string;
    tenantId: string;
    agent: string;
    agentName: string;
    agentVersion: number;
    scorers: Array<Record<string, unknown>>;
    replayOf: string | Record<string, unknown> | null;
    cases: NewEvalCase[];
  },
): Promise<void> {
  const cases = JSON.stringify(
    e.cases.map((c, idx) => ({
      idx,
      input: c.input,
      expect: c.expect,
      source_job_id: c.sourceJobId,
      job_id: c.jobId,
    })),
  );
  await db.execute(sql`
    WITH e AS (
      INSERT INTO evals (id, tenant_id, agent, agent_name, agent_version, scorers, replay_of, cases_total)
      VALUES (${e.id}::uuid, ${e.tenantId}, ${e.agent}, ${e.agentName}, ${e.agentVersion}::int,
        ${JSON.stringify(e.scorers)}::jsonb, ${e.replayOf === null ? null : JSON.stringify(e.replayOf)}::jsonb,
        ${e.cases.length}::int)
      RETURNING id
    )
    INSERT INTO eval_cases (eval_id, idx, tenant_id, input, expect, source_job_id, job_id)
    SELECT e.id, c.idx, ${e.tenantId}, c.input, c.expect, c.source_job_id, c.job_id
    FROM e, jsonb_to_recordset(${cases}::jsonb) AS c(idx int, input jsonb, expect text, source_job_id uuid, job_id uuid)`);
}

/**
 * A case's latency: its job's total (created to finished, in whole ms, as the job view's
 * `total_latency_ms`); the one expression the cases and the summary's percentiles read.
 */
const latencyMs = sql`floor(extract(epoch FROM (j.finished_at - j.created_at)) * 1000)::bigint`;

export interface EvalRow {
  id: string;
  agent: string;
  agentName: string;
  agentVersion: number;
  scorers: Array<Record<string, unknown>>;
  replayOf: string | Record<string, unknown> | null;
  casesTotal: number;
  createdAt: Date;
  /** created_at with its microseconds, for a list cursor. */
  exactCreatedAt: string;
}

export interface EvalCaseRow {
  index: number;
  input: { messages: ChatMessage[] };
  expect: string | null;
  sourceJobId: string | null;
  jobId: string;
  state: JobState | null;
  output: string | null;
  scores: Array<Record<string, unknown>> | null;
  score: number | null;
  pass: boolean | null;
  costUsd: number | null;
  latencyMs: number | null;
  scoredAt: Date | null;
}

type RawEval = {
  id: string;
  agent: string;
  agent_name: string;
  agent_version: number;
  scorers: Array<Record<string, unknown>>;
  replay_of: string | Record<string, unknown> | null;
  cases_total: number;
  created_at: string | Date;
  exact_created_at: string;
};

const evalColumns = sql`id, agent, agent_name, agent_version, scorers, replay_of, cases_total, created_at,
  to_char(created_at at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"') AS exact_created_at`;

function evalFromRaw(r: RawEval): EvalRow {
  return {
    id: r.id,
    agent: r.agent,
    agentName: r.agent_name,
    agentVersion: Number(r.agent_version),
    scorers: r.scorers,
    replayOf: r.replay_of,
    casesTotal: Number(r.cases_total),
    createdAt: new Date(r.created_at),
    exactCreatedAt: r.exact_created_at,
  };
}

const num = (v: unknown): number | null => (v === null || v === undefined ? null : Number(v));

/** The tenant's eval (null: none with that id, or another tenant's). */
export async function getEvalRow(db: Db, tenantId: string, id: string): Promise<EvalRow | null> {
  const [row] = resultRows<RawEval>(
    await db.execute(sql`SELECT ${evalColumns} FROM evals WHERE id = ${id}::uuid AND tenant_id = ${tenantId}`),
  );
  return row ? evalFromRaw(row) : null;
}

/** The eval's cases in order, each with its job's state, answer, cost and latency. */
export async function getEvalCases(db: Db, tenantId: string, evalId: string): Promise<EvalCaseRow[]> {
  const rows = resultRows<Record<string, unknown>>(
    await db.execute(sql`
      SELECT c.idx, c.input, c.expect, c.source_job_id, c.job_id, j.state, j.output, c.scores, c.score, c.pass,
        j.cost_usd, ${latencyMs} AS latency_ms, c.scored_at
      FROM eval_cases c LEFT JOIN jobs j ON j.id = c.job_id AND j.tenant_id = c.tenant_id
      WHERE c.eval_id = ${evalId}::uuid AND c.tenant_id = ${tenantId}
      ORDER BY c.idx`),
  );
  return rows.map((r) => ({
    index: Number(r.idx),
    input: r.input as { messages: ChatMessage[] },
    expect: (r.expect as string | null) ?? null,
    sourceJobId: (r.source_job_id as string | null) ?? null,
    jobId: r.job_id as string,
    state: (r.state as JobState | null) ?? null,
    output: (r.output as string | null) ?? null,
    scores: (r.scores as Array<Record<string, unknown>> | null) ?? null,
    score: num(r.score),
    pass: (r.pass as boolean | null) ?? null,
    costUsd: num(r.cost_usd),
    latencyMs: num(r.latency_ms),
    scoredAt: r.scored_at === null || r.scored_at === undefined ? null : new Date(r.scored_at as string),
  }));
}

/**
 * Each eval's summary, in one statement: counts, pass rate, mean score, cost, and nearest-rank
 * p50/p95 latency (percentile_disc: a reported percentile is a case's own latency).
 */
export async function evalSummaries(db: Db, tenantId: string, ids: string[]): Promise<Map<string, EvalSummary>> {
  const out = new Map<string, EvalSummary>();
  if (ids.length === 0) return out;
  const rows = resultRows<Record<string, unknown>>(
    await db.execute(sql`
      SELECT c.eval_id, count(*) AS cases_total,
        count(*) FILTER (WHERE j.id IS NULL OR j.state IN ${FINAL_STATES_SQL}) AS finished,
        count(c.scored_at) AS scored, count(*) FILTER (WHERE c.pass) AS passed, avg(c.score) AS mean_score,
        coalesce(sum(j.cost_usd), 0) AS cost_usd,
        percentile_disc(0.5) WITHIN GROUP (ORDER BY ${latencyMs}) FILTER (WHERE j.finished_at IS NOT NULL) AS p50,
        percentile_disc(0.95) WITHIN GROUP (ORDER BY ${latencyMs}) FILTER (WHERE j.finished_at IS NOT NULL) AS p95
      FROM eval_cases c LEFT JOIN jobs j ON j.id = c.job_id AND j.tenant_id = c.tenant_id
      WHERE c.tenant_id = ${tenantId} AND c.eval_id IN (SELECT unnest(${`{${ids.join(",")}}`}::uuid[]))
      GROUP BY c.eval_id`),
  );
  for (const r of rows) {
    const scored = Number(r.scored);
    const passed = Number(r.passed);
    out.set(r.eval_id as string, {
      cases_total: Number(r.cases_total),
      finished: Number(r.finished),
      scored,
      passed,
      pass_rate: scored === 0 ? null : passed / scored,
      mean_score: num(r.mean_score),
      cost_usd: Number(r.cost_usd),
      latency_p50_ms: num(r.p50),
      latency_p95_ms: num(r.p95),
    });
  }
  return out;
}

/** An eval with no cases has no summary row: this is its summary. */
export const EMPTY_SUMMARY: EvalSummary = {
  cases_total: 0,
  finished: 0,
  scored: 0,
  passed: 0,
  pass_rate: null,
  mean_score: null,
  cost_usd: 0,
  latency_p50_ms: null,
  latency_p95_ms: null,
};

/** The tenant's evals, newest first, keyset-paginated on (created_at, id) as GET /v1/jobs is. */
export async function listEvals(
  db: Db,
  tenantId: string,
  opts: { limit: number; cursor?: ListCursor },
): Promise<{ evals: EvalRow[]; nextCursor: string | null }> {
  const after = opts.cursor
    ? sql`AND (created_at, id) < (${opts.cursor.createdAt}::timestamptz, ${opts.cursor.id}::uuid)`
    : sql``;
  const rows = resultRows<RawEval>(
    await db.execute(sql`
      SELECT ${evalColumns} FROM evals WHERE tenant_id = ${tenantId} ${after}
      ORDER BY created_at DESC, id DESC LIMIT ${opts.limit + 1}`),
  ).map(evalFromRaw);
  const page = rows.slice(0, opts.limit);
  const last = page[page.length - 1];
  const nextCursor =
    rows.length > opts.limit && last ? encodeCursor({ createdAt: last.exactCreatedAt, id: last.id }) : null;
  return { evals: page, nextCursor };
}

// The scorers' side (sandbox-host/evals/eval-scorer.ts).

/** A judge job as a pending case sees it. */
export interface JudgeJobFacts {
  state: JobState | null;
  output: string | null;
}

/** A case whose job ended and that has no scores yet, with what scoring it needs. */
export interface PendingCase {
  evalId: string;
  index: number;
  tenantId: string;
  scorers: Array<Record<string, unknown>>;
  input: { messages: ChatMessage[] };
  expect: string | null;
  jobId: string;
  /** Null when the job is gone (purged). */
  state: JobState | null;
  output: string | null;
  error: JobError | null;
  /** Judge jobs already made: scorer name → job id. */
  judgeJobs: Record<string, string>;
  /** Those judge jobs' states and answers, by job id. */
  judges: Record<string, JudgeJobFacts>;
}

/**
 * A case (`c`, its job `j` left-joined) a scorer has work for: unscored, its job ended (or gone),
 * and none of its judge jobs still open. A case waiting for its judges is left out until they end,
 * so a batch is never filled with cases nothing can be done for yet (and a judge waiting for a
 * person does not keep the fleet awake: it is a waiting job, which is not work).
 */
const READY_TO_SCORE = sql`c.scored_at IS NULL AND (j.id IS NULL OR j.state IN ${FINAL_STATES_SQL})
  AND NOT EXISTS (SELECT 1 FROM jobs jj WHERE jj.tenant_id = c.tenant_id AND jj.state NOT IN ${FINAL_STATES_SQL}
    AND jj.id IN (SELECT v::uuid FROM jsonb_each_text(coalesce(c.judge_jobs, '{}'::jsonb)) AS t(k, v)))`;

/**
 * Up to `limit` cases ready to score (READY_TO_SCORE), oldest eval first.
 * The partial index eval_cases_pending_idx holds exactly the unscored cases, so a pass with
 * nothing to score reads an empty index entry range.
 */
export async function pendingCases(db: Db, limit: number): Promise<PendingCase[]> {
  const rows = resultRows<Record<string, unknown>>(
    await db.execute(sql`
      SELECT c.eval_id, c.idx, c.tenant_id, e.scorers, c.input, c.expect, c.job_id, j.state, j.output, j.error,
        coalesce(c.judge_jobs, '{}'::jsonb) AS judge_jobs,
        (SELECT coalesce(jsonb_object_agg(jj.id, jsonb_build_object('state', jj.state, 'output', jj.output)), '{}'::jsonb)
          FROM jobs jj WHERE jj.tenant_id = c.tenant_id AND jj.id IN (
            SELECT v::uuid FROM jsonb_each_text(coalesce(c.judge_jobs, '{}'::jsonb)) AS t(k, v))) AS judges
      FROM eval_cases c
      JOIN evals e ON e.id = c.eval_id
      LEFT JOIN jobs j ON j.id = c.job_id AND j.tenant_id = c.tenant_id
      WHERE ${READY_TO_SCORE}
      ORDER BY e.created_at, c.idx
      LIMIT ${limit}`),
  );
  return rows.map((r) => ({
    evalId: r.eval_id as string,
    index: Number(r.idx),
    tenantId: r.tenant_id as string,
    scorers: r.scorers as Array<Record<string, unknown>>,
    input: r.input as { messages: ChatMessage[] },
    expect: (r.expect as string | null) ?? null,
    jobId: r.job_id as string,
    state: (r.state as JobState | null) ?? null,
    output: (r.output as string | null) ?? null,
    error: (r.error as JobError | null) ?? null,
    judgeJobs: r.judge_jobs as Record<string, string>,
    judges: r.judges as Record<string, JudgeJobFacts>,
  }));
}

/** Records a judge job a case's scorer made (merged into judge_jobs; an existing entry is kept). */
export async function recordJudgeJob(
  db: Db,
  evalId: string,
  index: number,
  scorer: string,
  jobId: string,
): Promise<void> {
  await db.execute(sql`
    UPDATE eval_cases SET judge_jobs = jsonb_build_object(${scorer}::text, ${jobId}::text) || coalesce(judge_jobs, '{}'::jsonb)
    WHERE eval_id = ${evalId}::uuid AND idx = ${index}::int AND scored_at IS NULL`);
}

/**
 * A case's scores, written once: a second scorer that raced for the same case (two hosts, or a
 * pass after a crash) finds scored_at set and writes nothing. Returns whether this write won.
 */
export async function writeScores(
  db: Db,
  evalId: string,
  index: number,
  result: { scores: Array<Record<string, unknown>>; score: number | null; pass: boolean },
): Promise<boolean> {
  const rows = resultRows<{ idx: number }>(
    await db.execute(sql`
      UPDATE eval_cases SET scores = ${JSON.stringify(result.scores)}::jsonb, score = ${result.score}::float8,
        pass = ${result.pass}, scored_at = now()
      WHERE eval_id = ${evalId}::uuid AND idx = ${index}::int AND scored_at IS NULL
      RETURNING idx`),
  );
  return rows.length > 0;
}

/**
 * Whether a case is ready to score (READY_TO_SCORE): the fleet is not idle while one is
 * (reaper-repo.ts fleetWork), so the scorers keep their busy cadence. A case whose job or judge
 * still runs needs nothing of it: that job is work of its own.
 */
export const SCORING_WORK_EXISTS = sql`EXISTS (SELECT 1 FROM eval_cases c LEFT JOIN jobs j ON j.id = c.job_id
  WHERE ${READY_TO_SCORE})`;
