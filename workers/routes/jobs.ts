/**
 * Job REST routes (docs/api.md). The job row in Postgres is the truth; the Redis ready index
 * only wakes claimers, so a failed ZADD is logged and the job is still accepted (hosts also
 * sweep Postgres for queued jobs).
 */
import { Hono } from "hono";
import { ApiError, CreateJobBodySchema, ListJobsQuerySchema } from "../../src/contracts";
import { createJob, decodeCursor, getJob, listJobs, toJobView } from "../../src/db";
import { type ModelCatalog, resolveModel } from "../../src/domain/models";
import { redisKeys } from "../../src/quota/keys";
import { callDependency, type Deps, withTimeout } from "../deps";
import { loggableError } from "../log";
import { readJsonBody, validate } from "../request/body";
import type { GatewayEnv } from "../types";

const READY_INDEX_TIMEOUT_MS = 500;
const keys = redisKeys();

export async function indexReadyJob(deps: Deps, jobId: string): Promise<void> {
  try {
    await withTimeout(
      deps.redis().zadd(keys.readyIndex(), { score: Date.now(), member: jobId }),
      READY_INDEX_TIMEOUT_MS,
      "redis",
    );
  } catch (err) {
    console.warn(
      JSON.stringify({
        msg: "ready index ZADD failed; hosts will find the job in Postgres",
        jobId,
        error: loggableError(err),
      }),
    );
  }
}

/** `model` must be one the operator offers (MODELS): it reaches the provider and names a quota key. */
export function assertModelOffered(models: ModelCatalog, model: string): void {
  if (resolveModel(models, model)) return;
  const offered = models.entries.map((e) => e.name);
  throw new ApiError(
    "invalid_request",
    offered.length === 0
      ? "model: this deployment offers no choice of model; omit the field"
      : `model: must be one of ${offered.join(", ")} (or omitted for ${offered[0]})`,
  );
}

export function notFoundJob(): ApiError {
  return new ApiError("not_found", "job not found");
}

export const jobRoutes = new Hono<GatewayEnv>()
  .post("/", async (c) => {
    const config = c.get("config");
    const body = await readJsonBody(c.req.raw, CreateJobBodySchema, config.maxBodyBytes);
    if (body.model !== undefined) assertModelOffered(config.models, body.model);
    const deps = c.get("deps");
    const db = deps.db();
    const { job, created } = await callDependency("postgres", () =>
      createJob(db, c.get("tenantId"), crypto.randomUUID(), body, {
        maxQueued: config.limits.maxQueuedJobsPerTenant,
      }),
    );
    // The index only wakes claimers (hosts also LISTEN and sweep Postgres): the answer waits
    // for the row, which is the job, not for the wake-up.
    if (created) c.executionCtx.waitUntil(indexReadyJob(deps, job.id));
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
    if (!job) throw notFoundJob();
    return c.json({ job: toJobView(job) });
  });
