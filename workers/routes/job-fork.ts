/**
 * A job's steps, and new jobs from them: fork and rerun (docs/api.md, "Steps, forks and reruns").
 * The source job is only read: its journal is never written by any of these routes.
 */
import { ForkBodySchema, ListStepsQuerySchema, RerunBodySchema, StepPageSchema } from "../../src/contracts/fork";
import { JobAnswerSchema } from "../../src/contracts/job";
import { BODY_ERRORS, jobIdParam, V1_ERRORS } from "../../src/contracts/openapi";
import { listSteps } from "../../src/db/fork-repo";
import { toJobView } from "../../src/db/job-view";
import { isJobId } from "../../src/db/jobs-repo";
import { forkJob } from "../commands/fork";
import { submitOptions } from "../commands/submit";
import { callDependency } from "../deps";
import { readOptionalJsonBody } from "../request/body";
import { missingJob } from "./jobs";
import { route, routes } from "./route";

const FORK_RESPONSES = [
  { status: 202, description: "The new job, state `queued`, with `forked_from`.", schema: JobAnswerSchema },
  {
    status: 200,
    description:
      "`idempotency_key` names a fork this tenant already made from the same request: that job, as it is now.",
    schema: JobAnswerSchema,
  },
];
const FORK_ERRORS = [
  "not_found",
  "gone",
  ...BODY_ERRORS,
  "idempotency_mismatch",
  "conflict",
  "budget_exceeded",
  ...V1_ERRORS,
] as const;

export const jobForkRoutes = routes(
  route({
    method: "get",
    path: "/:id/steps",
    operationId: "listJobSteps",
    tag: "jobs",
    summary: "A job's steps (its journal) in the order a recovery reads them, paged",
    description:
      "`step` is the number `run.recovered.from_step`, `run.forked.from_step` and a fork's `from_step` use. A job still running shows the steps committed so far.",
    auth: "bearer",
    parameters: [jobIdParam],
    query: ListStepsQuerySchema,
    responses: [{ status: 200, description: "One page; `next_after` is null on the last.", schema: StepPageSchema }],
    errors: ["not_found", "gone", "invalid_request", ...V1_ERRORS],
    handler: async (c, input) => {
      const query = input.query();
      const db = c.get("deps").db();
      const [tenantId, id] = [c.get("tenantId"), c.req.param("id")];
      const page = isJobId(id) ? await callDependency("postgres", () => listSteps(db, tenantId, id, query)) : null;
      if (!page) throw await missingJob(db, tenantId, id);
      return c.json({ steps: page.steps, next_after: page.nextAfter });
    },
  }),
  route({
    method: "post",
    path: "/:id/fork",
    operationId: "forkJob",
    tag: "jobs",
    summary: "A new job that continues from this job's steps 1..from_step",
    description:
      "Admitted as a submit is. The fork's journal starts as a copy of the source's steps 1..`from_step` (default: every step journaled so far); the source is never written. Its tool calls are not made again: their journaled results are the results, and a call in flight at the fork point gets `outcome_unknown` unless `replace_result` gives its result. The fork's first event is `run.forked`.",
    auth: "bearer",
    parameters: [jobIdParam],
    body: ForkBodySchema,
    responses: FORK_RESPONSES,
    errors: FORK_ERRORS,
    handler: async (c, input) => {
      const [tenantId, id] = [c.get("tenantId"), c.req.param("id")];
      const db = c.get("deps").db();
      if (!isJobId(id)) throw await missingJob(db, tenantId, id);
      const body = await input.body();
      const created = await forkJob(c.get("deps"), tenantId, id, body, submitOptions(c.get("config")), (w) =>
        c.executionCtx.waitUntil(w),
      );
      if (!created) throw await missingJob(db, tenantId, id);
      return c.json({ job: toJobView(created.job) }, created.created ? 202 : 200);
    },
  }),
  route({
    method: "post",
    path: "/:id/rerun",
    operationId: "rerunJob",
    tag: "jobs",
    summary: "A new job with this job's input, from step 0",
    description:
      "A fork with `from_step` 0: the original input, the job's agent version unless `agent` names another; nothing of the source's run is reused. The body may be empty.",
    auth: "bearer",
    parameters: [jobIdParam],
    body: RerunBodySchema,
    responses: FORK_RESPONSES,
    errors: FORK_ERRORS,
    handler: async (c) => {
      const [tenantId, id] = [c.get("tenantId"), c.req.param("id")];
      const db = c.get("deps").db();
      if (!isJobId(id)) throw await missingJob(db, tenantId, id);
      const body = await readOptionalJsonBody(c.req.raw, RerunBodySchema, c.get("config").maxBodyBytes);
      const created = await forkJob(
        c.get("deps"),
        tenantId,
        id,
        { ...body, from_step: 0 },
        submitOptions(c.get("config")),
        (w) => c.executionCtx.waitUntil(w),
      );
      if (!created) throw await missingJob(db, tenantId, id);
      return c.json({ job: toJobView(created.job) }, created.created ? 202 : 200);
    },
  }),
);
