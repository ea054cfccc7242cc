/** Bulk replays (docs/api.md, "Steps, forks and reruns"): rerun the jobs a filter selects, and their progress. */
import { ApiError } from "../../src/contracts/errors";
import { CreateReplayBodySchema, ReplayAnswerSchema, ReplayCreatedSchema } from "../../src/contracts/fork";
import { BODY_ERRORS, replayIdParam, V1_ERRORS } from "../../src/contracts/openapi";
import { isJobId } from "../../src/db/jobs-repo";
import { getReplay } from "../../src/db/replays-repo";
import { createReplay } from "../commands/replay";
import { submitOptions } from "../commands/submit";
import { callDependency } from "../deps";
import { route, routes } from "./route";

export const replayRoutes = routes(
  route({
    method: "post",
    path: "/",
    operationId: "createReplay",
    tag: "jobs",
    summary: "Rerun every job a filter selects (at most 1,000), as one batch",
    description:
      "Each selected job (newest first; child jobs left out) gets a rerun: a new job from step 0 with its input and its agent version, or `agent`. The reruns are inserted in one statement, all or none, under the tenant's queued-jobs limit and daily budget, and run in the tenant's share.",
    auth: "bearer",
    body: CreateReplayBodySchema,
    responses: [
      { status: 202, description: "The replay: its id and how many jobs it made.", schema: ReplayCreatedSchema },
    ],
    errors: [...BODY_ERRORS, "conflict", "budget_exceeded", ...V1_ERRORS],
    handler: async (c, input) => {
      const body = await input.body();
      const config = c.get("config");
      const replay = await createReplay(c.get("deps"), c.get("tenantId"), body, submitOptions(config), (w) =>
        c.executionCtx.waitUntil(w),
      );
      return c.json({ replay: { id: replay.id, jobs_total: replay.jobsTotal } }, 202);
    },
  }),
  route({
    method: "get",
    path: "/:id",
    operationId: "getReplay",
    tag: "jobs",
    summary: "A replay's progress: its jobs by state, each paired with the job it reruns",
    auth: "bearer",
    parameters: [replayIdParam],
    responses: [{ status: 200, description: "The replay.", schema: ReplayAnswerSchema }],
    errors: ["not_found", ...V1_ERRORS],
    handler: async (c) => {
      const id = c.req.param("id");
      const db = c.get("deps").db();
      const replay = isJobId(id) ? await callDependency("postgres", () => getReplay(db, c.get("tenantId"), id)) : null;
      if (!replay) throw new ApiError("not_found", "replay not found");
      return c.json({
        replay: {
          id: replay.id,
          filter: replay.filter,
          agent: replay.agent,
          created_at: replay.createdAt.toISOString(),
          jobs_total: replay.jobsTotal,
          progress: replay.progress,
          finished: replay.finished,
          jobs: replay.jobs.map((j) => ({ source_job_id: j.sourceJobId, job_id: j.jobId, state: j.state })),
        },
      });
    },
  }),
);
