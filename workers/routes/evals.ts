/** Evals (docs/api.md, "Evals"): run an agent version over cases and score each answer; read, list and compare them. */
import { ApiError } from "../../src/contracts/errors";
import {
  CreateEvalBodySchema,
  EvalAnswerSchema,
  EvalCompareSchema,
  EvalCreatedSchema,
  type EvalListItem,
  EvalPageSchema,
  type EvalView,
  ListEvalsQuerySchema,
  type ScoreView,
} from "../../src/contracts/eval";
import { BODY_ERRORS, evalIdParam, evalPairParams, V1_ERRORS } from "../../src/contracts/openapi";
import type { Db } from "../../src/db/client";
import {
  EMPTY_SUMMARY,
  type EvalCaseRow,
  type EvalRow,
  evalSummaries,
  getEvalCases,
  getEvalRow,
  listEvals,
} from "../../src/db/evals-repo";
import { isJobId } from "../../src/db/jobs-repo";
import { createEval } from "../commands/eval";
import { submitOptions } from "../commands/submit";
import { callDependency } from "../deps";
import { listCursor } from "./jobs";
import { route, routes } from "./route";

function notFoundEval(): ApiError {
  return new ApiError("not_found", "eval not found");
}

function listItem(e: EvalRow, summaries: Map<string, EvalListItem["summary"]>): EvalListItem {
  return {
    id: e.id,
    agent: e.agent,
    agent_version: { name: e.agentName, version: e.agentVersion },
    created_at: e.createdAt.toISOString(),
    cases_total: e.casesTotal,
    summary: summaries.get(e.id) ?? EMPTY_SUMMARY,
  };
}

function caseView(c: EvalCaseRow): EvalView["cases"][number] {
  return {
    index: c.index,
    input: c.input,
    expect: c.expect,
    source_job_id: c.sourceJobId,
    job_id: c.jobId,
    state: c.state,
    output: c.output,
    scores: c.scores as ScoreView[] | null,
    score: c.score,
    pass: c.scoredAt === null ? null : c.pass,
    cost_usd: c.costUsd,
    latency_ms: c.latencyMs,
    scored_at: c.scoredAt?.toISOString() ?? null,
  };
}

/** The tenant's eval with its cases and summary; null: no such eval of this tenant. */
async function readEval(db: Db, tenantId: string, id: string): Promise<EvalView | null> {
  if (!isJobId(id)) return null;
  const row = await callDependency("postgres", () => getEvalRow(db, tenantId, id));
  if (!row) return null;
  const [cases, summaries] = await Promise.all([
    callDependency("postgres", () => getEvalCases(db, tenantId, id)),
    callDependency("postgres", () => evalSummaries(db, tenantId, [id])),
  ]);
  return {
    ...listItem(row, summaries),
    scorers: row.scorers,
    replay_of: row.replayOf,
    cases: cases.map(caseView),
  };
}

const sameCase = (a: EvalView["cases"][number], b: EvalView["cases"][number]) =>
  JSON.stringify(a.input) === JSON.stringify(b.input) && a.expect === b.expect;

export const evalRoutes = routes(
  route({
    method: "post",
    path: "/",
    operationId: "createEval",
    tag: "evals",
    summary: "Run an agent version over cases (at most 1,000) as jobs and score each answer",
    description:
      "The cases come from `cases` or from `replay_of` (a replay's id: the jobs it reran; a replay filter: the jobs it selects), each then expecting its source job's answer. Their jobs are inserted in one statement, all or none, under the tenant's queued-jobs limit and daily budget, and run in the tenant's share. A host scores each case when its job ends: `equals`, `contains`, `regex` and `json_schema` on a worker thread with a time bound, `judge` by a job of the judge agent.",
    auth: "bearer",
    body: CreateEvalBodySchema,
    responses: [
      { status: 202, description: "The eval: its id and how many cases it runs.", schema: EvalCreatedSchema },
    ],
    errors: [...BODY_ERRORS, "not_found", "conflict", "budget_exceeded", ...V1_ERRORS],
    handler: async (c, input) => {
      const body = await input.body();
      const config = c.get("config");
      const made = await createEval(c.get("deps"), c.get("tenantId"), body, submitOptions(config), (w) =>
        c.executionCtx.waitUntil(w),
      );
      return c.json({ eval: { id: made.id, cases_total: made.casesTotal } }, 202);
    },
  }),
  route({
    method: "get",
    path: "/",
    operationId: "listEvals",
    tag: "evals",
    summary: "The tenant's evals with their summaries, newest first, keyset-paginated",
    auth: "bearer",
    query: ListEvalsQuerySchema,
    responses: [{ status: 200, description: "One page; `next_cursor` is null on the last.", schema: EvalPageSchema }],
    errors: ["invalid_request", ...V1_ERRORS],
    handler: async (c, input) => {
      const query = input.query();
      const cursor = listCursor(query.cursor);
      const db = c.get("deps").db();
      const tenantId = c.get("tenantId");
      const page = await callDependency("postgres", () => listEvals(db, tenantId, { limit: query.limit, cursor }));
      const summaries = await callDependency("postgres", () =>
        evalSummaries(
          db,
          tenantId,
          page.evals.map((e) => e.id),
        ),
      );
      return c.json({ evals: page.evals.map((e) => listItem(e, summaries)), next_cursor: page.nextCursor });
    },
  }),
  route({
    method: "get",
    path: "/:id",
    operationId: "getEval",
    tag: "evals",
    summary: "An eval: each case's job, scores, cost and latency, and the summary",
    auth: "bearer",
    parameters: [evalIdParam],
    responses: [{ status: 200, description: "The eval.", schema: EvalAnswerSchema }],
    errors: ["not_found", ...V1_ERRORS],
    handler: async (c) => {
      const found = await readEval(c.get("deps").db(), c.get("tenantId"), c.req.param("id"));
      if (!found) throw notFoundEval();
      return c.json({ eval: found });
    },
  }),
  route({
    method: "get",
    path: "/:a/compare/:b",
    operationId: "compareEvals",
    tag: "evals",
    summary: "Two evals side by side: their summaries and their cases paired by index",
    auth: "bearer",
    parameters: evalPairParams,
    responses: [{ status: 200, description: "The pair.", schema: EvalCompareSchema }],
    errors: ["not_found", ...V1_ERRORS],
    handler: async (c) => {
      const db = c.get("deps").db();
      const tenantId = c.get("tenantId");
      const [a, b] = await Promise.all([
        readEval(db, tenantId, c.req.param("a")),
        readEval(db, tenantId, c.req.param("b")),
      ]);
      if (!a || !b) throw notFoundEval();
      const n = Math.max(a.cases.length, b.cases.length);
      const pairs = Array.from({ length: n }, (_, index) => {
        const ca = a.cases[index] ?? null;
        const cb = b.cases[index] ?? null;
        return {
          index,
          same_case: ca !== null && cb !== null && sameCase(ca, cb),
          a: ca,
          b: cb,
          score_delta: ca?.score != null && cb?.score != null ? cb.score - ca.score : null,
        };
      });
      const head = ({ cases: _c, scorers: _s, replay_of: _r, ...rest }: EvalView): EvalListItem => rest;
      return c.json({ a: head(a), b: head(b), pairs });
    },
  }),
);
