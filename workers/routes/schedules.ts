/**
 * Schedules (docs/api.md "Schedules"): a tenant's cron schedules. The gateway only stores them,
 * with their first tick; hosts' schedulers (and the Worker's cron) fire the ticks
 * (src/db/schedules-repo.ts). A bad cron or timezone is a 400 naming it (croner, and for the zone
 * the rule every firer applies too, src/domain/schedule-time.ts).
 */
import { ApiError } from "../../src/contracts/errors";
import { BODY_ERRORS, scheduleIdParam, V1_ERRORS } from "../../src/contracts/openapi";
import {
  type CatchUp,
  CreateScheduleBodySchema,
  PatchScheduleBodySchema,
  SCHEDULE_LIMITS,
  ScheduleAnswerSchema,
  SchedulePageSchema,
} from "../../src/contracts/schedule";
import type { Db } from "../../src/db/client";
import {
  createSchedule,
  deleteSchedule,
  getSchedule,
  listSchedules,
  updateSchedule,
} from "../../src/db/schedules-repo";
import { assertAdmitted, planRefusal } from "../../src/domain/job-admission";
import type { ModelCatalog } from "../../src/domain/models";
import { cronProblem, nextTick, timezoneProblem } from "../../src/domain/schedule-time";
import { wakeSleepers } from "../commands/redis-accelerator";
import { resolveJobAgent } from "../commands/submit";
import { callDependency } from "../deps";
import { route, routes } from "./route";

const notFound = () => new ApiError("not_found", "schedule not found");

/** The cron and timezone checked (400 naming the bad one), and the first tick after now (null: disabled). */
function firstTick(cron: string, timezone: string, enabled: boolean): Date | null {
  const tz = timezoneProblem(timezone);
  if (tz !== null) throw new ApiError("invalid_request", `timezone: ${tz}`);
  const problem = cronProblem(cron, timezone);
  if (problem !== null) throw new ApiError("invalid_request", `cron: ${problem}`);
  return enabled ? nextTick(cron, timezone, new Date()) : null;
}

/**
 * Job admission's checks 1 and 2 (src/domain/job-admission.ts) on what the schedule's ticks will
 * run, with the status and code a POST /v1/jobs of the same body gets: its agent (known, not
 * archived, its model and tools), else the deployment's default model. Checks 3 and 4 (budget,
 * queue) are each tick's, when it fires: they say nothing about a tick next week.
 */
async function assertTicksAdmitted(db: Db, models: ModelCatalog, tenantId: string, agent: string | null) {
  if (agent !== null) await resolveJobAgent(db, models, tenantId, { agent });
  else assertAdmitted(planRefusal(models, tenantId, { model: null, tools: [] }));
}

export const scheduleRoutes = routes(
  route({
    method: "post",
    path: "/",
    operationId: "createSchedule",
    tag: "schedules",
    summary: "Create a schedule: a job at every tick of its cron",
    description:
      "`cron` has 5 fields (minute hour day-of-month month day-of-week) or 6 with seconds first; `timezone` is an IANA name (default UTC; a UTC offset such as `+05:30`, or `Factory`, is not one), daylight-saving changes included (a wall time the change skips fires at the first instant after it; one it repeats fires once). Each tick makes one job with `schedule_id` and `scheduled_for`. `catch_up` `latest` (default): after ticks passed with nothing firing, one job for the latest; `none`: those ticks make no job. A bad `cron` or `timezone` is a 400 naming it; `agent` is checked as POST /v1/jobs checks it, and without one the deployment's default model must be offered to the tenant (400 `invalid_request`, as a job naming no model). A tick that fails to fire is tried again after a growing delay, and `last_error` says why. Each tick is admitted again when it fires (model, tools, daily budget, queued jobs): a refused tick makes no job, is skipped, and `last_error` says why.",
    auth: "bearer",
    body: CreateScheduleBodySchema,
    responses: [{ status: 201, description: "The schedule, with its first tick.", schema: ScheduleAnswerSchema }],
    errors: [...BODY_ERRORS, "conflict", ...V1_ERRORS],
    handler: async (c, input) => {
      const body = await input.body();
      const timezone = body.timezone ?? "UTC";
      const enabled = body.enabled ?? true;
      const next = firstTick(body.cron, timezone, enabled);
      const db = c.get("deps").db();
      const tenantId = c.get("tenantId");
      await assertTicksAdmitted(db, c.get("config").models, tenantId, body.agent ?? null);
      const created = await callDependency("postgres", () =>
        createSchedule(
          db,
          tenantId,
          {
            cron: body.cron.trim(),
            timezone,
            agent: body.agent ?? null,
            input: body.input,
            metadata: body.metadata ?? {},
            enabled,
            catchUp: body.catch_up ?? "latest",
            nextRunAt: next,
          },
          SCHEDULE_LIMITS.maxSchedulesPerTenant,
        ),
      );
      if (!created) {
        throw new ApiError(
          "conflict",
          `this tenant already has ${SCHEDULE_LIMITS.maxSchedulesPerTenant} schedules (the limit); delete one first`,
        );
      }
      // Sleeping hosts know the old soonest tick only (ear_schedule reaches awake ones).
      wakeSleepers(c.get("deps"), (work) => c.executionCtx.waitUntil(work));
      return c.json({ schedule: created }, 201);
    },
  }),
  route({
    method: "get",
    path: "/",
    operationId: "listSchedules",
    tag: "schedules",
    summary: "The tenant's schedules, oldest first",
    auth: "bearer",
    responses: [{ status: 200, description: "Every schedule (at most 100).", schema: SchedulePageSchema }],
    errors: [...V1_ERRORS],
    handler: async (c) => {
      const db = c.get("deps").db();
      const schedules = await callDependency("postgres", () => listSchedules(db, c.get("tenantId")));
      return c.json({ schedules });
    },
  }),
  route({
    method: "get",
    path: "/:id",
    operationId: "getSchedule",
    tag: "schedules",
    summary: "One schedule",
    auth: "bearer",
    parameters: [scheduleIdParam],
    responses: [{ status: 200, description: "The schedule.", schema: ScheduleAnswerSchema }],
    errors: ["not_found", ...V1_ERRORS],
    handler: async (c) => {
      const db = c.get("deps").db();
      const found = await callDependency("postgres", () => getSchedule(db, c.get("tenantId"), c.req.param("id")));
      if (!found) throw notFound();
      return c.json({ schedule: found });
    },
  }),
  route({
    method: "patch",
    path: "/:id",
    operationId: "updateSchedule",
    tag: "schedules",
    summary: "Change a schedule: enable, disable, its cron, timezone, input, catch_up or metadata",
    description:
      "Fields left out keep their value. The next tick is computed again from now (a disabled schedule has none); a tick whose job was already made is never made twice. A schedule that stays enabled is checked again as at create (its agent, else the default model, must still be offered to the tenant); disabling is always allowed.",
    auth: "bearer",
    parameters: [scheduleIdParam],
    body: PatchScheduleBodySchema,
    responses: [{ status: 200, description: "The schedule as it now is.", schema: ScheduleAnswerSchema }],
    errors: [...BODY_ERRORS, "not_found", "conflict", ...V1_ERRORS],
    handler: async (c, input) => {
      const db = c.get("deps").db();
      const tenantId = c.get("tenantId");
      const id = c.req.param("id");
      const current = await callDependency("postgres", () => getSchedule(db, tenantId, id));
      if (!current) throw notFound();
      const patch = await input.body();
      const cron = patch.cron?.trim() ?? current.cron;
      const timezone = patch.timezone ?? current.timezone;
      const enabled = patch.enabled ?? current.enabled;
      const timingChanged = patch.cron !== undefined || patch.timezone !== undefined || enabled !== current.enabled;
      const next = timingChanged
        ? firstTick(cron, timezone, enabled)
        : current.next_run_at === null
          ? null
          : new Date(current.next_run_at);
      // A schedule left enabled is checked again: the allow-list (or its agent) may have changed
      // since it was created. Disabling one is always allowed.
      if (enabled) await assertTicksAdmitted(db, c.get("config").models, tenantId, current.agent);
      const updated = await callDependency("postgres", () =>
        updateSchedule(db, tenantId, id, {
          cron,
          timezone,
          input: patch.input ?? current.input,
          metadata: patch.metadata ?? current.metadata,
          enabled,
          catchUp: (patch.catch_up ?? current.catch_up) as CatchUp,
          nextRunAt: next,
        }),
      );
      if (!updated) throw notFound();
      if (timingChanged) wakeSleepers(c.get("deps"), (work) => c.executionCtx.waitUntil(work));
      return c.json({ schedule: updated });
    },
  }),
  route({
    method: "delete",
    path: "/:id",
    operationId: "deleteSchedule",
    tag: "schedules",
    summary: "Delete a schedule (its jobs stay)",
    auth: "bearer",
    parameters: [scheduleIdParam],
    responses: [{ status: 204, description: "Deleted; no more ticks fire." }],
    errors: ["not_found", ...V1_ERRORS],
    handler: async (c) => {
      const db = c.get("deps").db();
      const deleted = await callDependency("postgres", () => deleteSchedule(db, c.get("tenantId"), c.req.param("id")));
      if (!deleted) throw notFound();
      return c.body(null, 204);
    },
  }),
);
