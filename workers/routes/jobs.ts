/** Job REST routes (docs/api.md). Submitting is the `submitJob` command (commands/submit.ts). */
import { Hono } from "hono";
import { ApiError } from "../../src/contracts/errors";
import { CreateJobBodySchema, ListJobsQuerySchema } from "../../src/contracts/job";
import { getTree } from "../../src/db/children-repo";
import type { Db } from "../../src/db/client";
import { toJobView } from "../../src/db/job-view";
import { decodeCursor, getJob, isJobId, listJobs } from "../../src/db/jobs-repo";
import { wasPurged } from "../../src/db/retention-repo";
import { submitJob } from "../commands/submit";
import { callDependency } from "../deps";
import { readJsonBody, validate } from "../request/body";
import type { GatewayEnv } from "../types";

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

export const jobRoutes = new Hono<GatewayEnv>()
  .post("/", async (c) => {
    const config = c.get("config");
    const body = await readJsonBody(c.req.raw, CreateJobBodySchema, config.maxBodyBytes);
    // The answer waits for the row, which is the job, not for the ready-index wake-up.
    const { job, created } = await submitJob(
      c.get("deps"),
      c.get("tenantId"),
      body,
      { maxQueued: config.limits.maxQueuedJobsPerTenant, models: config.models },
      (work) => c.executionCtx.waitUntil(work),
    );
    return c.json({ job: toJobView(job) }, created ? 202 : 200);
  })
  .get("/", async (c) => {
    const query = validate(ListJobsQuerySchema, c.req.query());
    const cursor = query.cursor === undefined ? undefined : decodeCursor(query.cursor);
    if (cursor === null) throw new ApiError("invalid_request", "cursor: not a cursor returned by this API");
    const db = c.get("deps").db();
    const page = await callDependency("postgres", () =>
      listJobs(db, c.get("tenantId"), { state: query.state, limit: query.limit, cursor }),
    );
    return c.json({ jobs: page.jobs.map(toJobView), next_cursor: page.nextCursor });
  })
  .get("/:id", async (c) => {
    const db = c.get("deps").db();
    const job = await callDependency("postgres", () => getJob(db, c.get("tenantId"), c.req.param("id")));
    if (!job) throw await missingJob(db, c.get("tenantId"), c.req.param("id"));
    return c.json({ job: toJobView(job) });
  })
  .get("/:id/tree", async (c) => {
    const db = c.get("deps").db();
    const tree = await callDependency("postgres", () => getTree(db, c.get("tenantId"), c.req.param("id")));
    if (!tree) throw await missingJob(db, c.get("tenantId"), c.req.param("id"));
    return c.json({ tree });
  });
