/** Job REST routes (docs/api.md). Submitting is the `submitJob` command (commands/submit.ts). */
import { ApiError } from "../../src/contracts/errors";
import {
  CreateJobBatchBodySchema,
  CreateJobBodySchema,
  GetJobQuerySchema,
  JobAnswerSchema,
  JobBatchAnswerSchema,
  JobBatchEnvelopeSchema,
  JobPageSchema,
  LIMITS,
  ListJobsQuerySchema,
} from "../../src/contracts/job";
import { BODY_ERRORS, jobIdParam, V1_ERRORS } from "../../src/contracts/openapi";
import { JobTreeSchema } from "../../src/contracts/tree";
import { getTree } from "../../src/db/children-repo";
import type { Db } from "../../src/db/client";
import { toJobView } from "../../src/db/job-view";
import { decodeCursor, getJob, isJobId, type ListCursor, listJobs } from "../../src/db/jobs-repo";
import { wasPurged } from "../../src/db/retention-repo";
import { submitJob, submitJobs } from "../commands/submit";
import { callDependency } from "../deps";
import { readJsonBody } from "../request/body";
import { route, routes } from "./route";

export function notFoundJob(): ApiError {
  return new ApiError("not_found", "job not found");
}

/**
 * The answer for a job id the tenant has no row for: 410 `gone` when the retention purge deleted
 * it (its tombstone says so), else 404. Costs one indexed read, only on the miss path.
 */
export async function missingJob(db: Db, tenantId: string, id: string): Promise<ApiError> {
  if (isJobId(id) && (await callDependency("postgres", () => wasPurged(db, tenantId, id)))) {
    return new ApiError("gone", "job deleted: it finished longer ago than the retention (JOB_RETENTION_S)");
  }
  return notFoundJob();
}

/** A list's `cursor` parameter as the keyset it names (undefined: the first page); 400 when it is none of ours. */
export function listCursor(raw: string | undefined): ListCursor | undefined {
  const cursor = raw === undefined ? undefined : decodeCursor(raw);
  if (cursor === null) throw new ApiError("invalid_request", "cursor: not a cursor returned by this API");
  return cursor;
}

export const jobRoutes = routes(
  route({
    method: "post",
    path: "/",
    operationId: "createJob",
    tag: "jobs",
    summary: "Submit a job",
    description:
      "Answers once the job row is committed in Postgres. The same `idempotency_key` with the same body returns the same job; with another body it is a 409 `idempotency_mismatch`. A valid W3C `traceparent` header is kept with the job as a link: the run's trace is the operator's, named after the job (`trace_id`), and its execution span links to the client's span; only when the operator sets OTEL_TRUST_CLIENT_SAMPLING do the run's spans join the client's trace (then `trace_id` is the client's).",
    auth: "bearer",
    body: CreateJobBodySchema,
    responses: [
      { status: 202, description: "A new job, state `queued`.", schema: JobAnswerSchema },
      {
        status: 200,
        description: "`idempotency_key` names a job this tenant already created: that job, as it is now.",
        schema: JobAnswerSchema,
      },
    ],
    errors: [...BODY_ERRORS, "idempotency_mismatch", "budget_exceeded", ...V1_ERRORS],
    handler: async (c, input) => {
      const config = c.get("config");
      const body = await input.body();
      // The answer waits for the row, which is the job, not for the ready-index wake-up.
      const { job, created } = await submitJob(
        c.get("deps"),
        c.get("tenantId"),
        body,
        {
          maxQueued: config.limits.maxQueuedJobsPerTenant,
          models: config.models,
          traceparent: c.req.header("traceparent") ?? null,
          trustClientTrace: config.trustClientSampling,
        },
        (work) => c.executionCtx.waitUntil(work),
      );
      return c.json({ job: toJobView(job) }, created ? 202 : 200);
    },
  }),
  route({
    method: "post",
    path: "/batch",
    operationId: "createJobBatch",
    tag: "jobs",
    summary: "Submit up to 100 jobs in one call, all or none",
    description:
      "Each item is a POST /v1/jobs body under the same rules; the rows are one INSERT. Any refused item (400, 409, 413 naming `jobs[i]`) or a batch past the queued-jobs limit or the tenant's daily budget (429) creates nothing. An item whose `idempotency_key` this tenant already used answers that job. The body cap is 1 MiB (or MAX_BODY_BYTES if larger); each item must fit MAX_BODY_BYTES.",
    auth: "bearer",
    body: CreateJobBatchBodySchema,
    responses: [
      {
        status: 202,
        description: "At least one job was created; every job, in the batch's order.",
        schema: JobBatchAnswerSchema,
      },
      {
        status: 200,
        description:
          "Every item's `idempotency_key` named a job this tenant already created: those jobs, as they are now.",
        schema: JobBatchAnswerSchema,
      },
    ],
    errors: [...BODY_ERRORS, "idempotency_mismatch", "conflict", "budget_exceeded", ...V1_ERRORS],
    handler: async (c) => {
      const config = c.get("config");
      // The envelope here, each item in submitJobs, so a refusal names its item (`jobs[3].input: …`);
      // together they accept what CreateJobBatchBodySchema declares.
      const cap = Math.max(LIMITS.maxBatchBodyBytes, config.maxBodyBytes);
      const { jobs } = await readJsonBody(c.req.raw, JobBatchEnvelopeSchema, cap);
      const answered = await submitJobs(
        c.get("deps"),
        c.get("tenantId"),
        jobs,
        { maxQueued: config.limits.maxQueuedJobsPerTenant, models: config.models, maxItemBytes: config.maxBodyBytes },
        (work) => c.executionCtx.waitUntil(work),
      );
      const anyCreated = answered.some((a) => a.created);
      return c.json({ jobs: answered.map((a) => toJobView(a.job)) }, anyCreated ? 202 : 200);
    },
  }),
  route({
    method: "get",
    path: "/",
    operationId: "listJobs",
    tag: "jobs",
    summary: "The tenant's jobs, newest first, keyset-paginated",
    auth: "bearer",
    query: ListJobsQuerySchema,
    responses: [{ status: 200, description: "One page; `next_cursor` is null on the last.", schema: JobPageSchema }],
    errors: ["invalid_request", ...V1_ERRORS],
    handler: async (c, input) => {
      const query = input.query();
      const cursor = listCursor(query.cursor);
      const db = c.get("deps").db();
      const page = await callDependency("postgres", () =>
        listJobs(db, c.get("tenantId"), {
          state: query.state,
          scheduleId: query.schedule_id,
          limit: query.limit,
          cursor,
        }),
      );
      return c.json({ jobs: page.jobs.map(toJobView), next_cursor: page.nextCursor });
    },
  }),
  route({
    method: "get",
    path: "/:id",
    operationId: "getJob",
    tag: "jobs",
    summary: "One job",
    description: "With `include=input` the view also has the job's `input`: the messages it was submitted with.",
    auth: "bearer",
    parameters: [jobIdParam],
    query: GetJobQuerySchema,
    responses: [{ status: 200, description: "The job.", schema: JobAnswerSchema }],
    errors: ["not_found", "gone", ...V1_ERRORS],
    handler: async (c, input) => {
      const { include } = input.query();
      const db = c.get("deps").db();
      const job = await callDependency("postgres", () => getJob(db, c.get("tenantId"), c.req.param("id")));
      if (!job) throw await missingJob(db, c.get("tenantId"), c.req.param("id"));
      const view = toJobView(job);
      return c.json({ job: include === "input" ? { ...view, input: job.input } : view });
    },
  }),
  route({
    method: "get",
    path: "/:id/tree",
    operationId: "getJobTree",
    tag: "jobs",
    summary: "A job and the child jobs its delegate calls created, nested",
    description:
      "Every descendant with its state, timing facts and usage, and the usage summed over each subtree. A child's `parent_call_id` is the delegate call it answers.",
    auth: "bearer",
    parameters: [jobIdParam],
    responses: [{ status: 200, description: "The tree.", schema: JobTreeSchema }],
    errors: ["not_found", "gone", ...V1_ERRORS],
    handler: async (c) => {
      const db = c.get("deps").db();
      const tree = await callDependency("postgres", () => getTree(db, c.get("tenantId"), c.req.param("id")));
      if (!tree) throw await missingJob(db, c.get("tenantId"), c.req.param("id"));
      return c.json({ tree });
    },
  }),
);
