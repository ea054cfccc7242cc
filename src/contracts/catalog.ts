/**
 * What a tenant can look up about what it may run and what it spent: its agents (pages and
 * answers of /v1/agents, around AgentViewSchema), the models it may name (GET /v1/models) and
 * its token usage per day and model (GET /v1/usage).
 */
import { z } from "zod";
import { AGENT_LIMITS, AgentViewSchema } from "./agent";
import { LIMITS } from "./job";
import { JOB_STATES } from "./job-state";
import { text } from "./text";

/** GET /v1/agents and GET /v1/agents/{name}/versions: keyset pages like GET /v1/jobs. */
export const ListAgentsQuerySchema = z.object({
  limit: z.coerce.number().int().min(1).max(AGENT_LIMITS.maxListLimit).default(LIMITS.defaultListLimit),
  cursor: text().max(200).optional(),
});

/** One version of an agent (create, get, new version, archive). */
export const AgentAnswerSchema = z.object({ agent: AgentViewSchema });
/** Live agents at their latest versions, by name; `next_cursor` is null on the last page. */
export const AgentPageSchema = z.object({ agents: z.array(AgentViewSchema), next_cursor: z.string().nullable() });
/** An agent's versions, newest first; `next_cursor` is null on the last page. */
export const AgentVersionPageSchema = z.object({
  versions: z.array(AgentViewSchema),
  next_cursor: z.string().nullable(),
});

/**
 * A model as a tenant sees it: its public name and what bounds the tenant's use of it. Where the
 * provider is and which key it takes are the operator's, and stay out.
 */
export const ModelViewSchema = z.object({
  name: z.string(),
  /** The model a job runs on when neither it nor its agent names one. */
  default: z.boolean(),
  /** Model turns this tenant may have in flight on it at once; null: no per-tenant limit. */
  tenant_concurrency: z.number().int().min(1).nullable(),
  /** The operator's prices (the registry's `pricing`); null: calls on it have no cost. */
  pricing: z.object({ input_usd_per_mtok: z.number().min(0), output_usd_per_mtok: z.number().min(0) }).nullable(),
});
export const ModelListSchema = z.object({ models: z.array(ModelViewSchema) });

/**
 * A tool an agent may list in `tools`: a built-in sandbox tool, or a code tool some host offers
 * (HOST_TOOLS, docs/tools.md "Code tools"), as the model sees it.
 */
export const ToolViewSchema = z.object({
  name: z.string(),
  kind: z.enum(["sandbox", "code"]),
  description: z.string(),
  /** The arguments' JSON Schema, as offered to the model. */
  input_schema: z.record(z.string(), z.unknown()),
  /** A repeat of the same call (same idempotency key) is safe. Sandbox tools: false. */
  idempotent: z.boolean(),
  /** Every call waits for a person's approval (the tool's own setting; an agent can ask it of any tool). */
  requires_approval: z.boolean(),
  /** Code tools: the call's bound on its thread, ms; sandbox tools: null (a shell call takes its own timeout_s). */
  timeout_ms: z.number().int().nullable(),
  /** Code tools: how many hosts offer it now (a job on a host without it gets tool_unavailable); sandbox tools: null. */
  hosts: z.number().int().min(1).nullable(),
});
export const ToolListSchema = z.object({ tools: z.array(ToolViewSchema) });

/** The longest range one GET /v1/usage covers, in days (both ends included). */
export const MAX_USAGE_DAYS = 366;

const DAY_RE = /^\d{4}-\d{2}-\d{2}$/;

/** A calendar day as YYYY-MM-DD that exists (2026-02-30 does not). */
export const daySchema = text()
  .regex(DAY_RE, "must be a date as YYYY-MM-DD")
  .refine((d) => {
    const t = Date.parse(`${d}T00:00:00Z`);
    return Number.isFinite(t) && new Date(t).toISOString().slice(0, 10) === d;
  }, "is not a calendar date");

const DAY_MS = 86_400_000;

/** Days from `from` through `to`, both included. */
export function daysInRange(from: string, to: string): number {
  return Math.round((Date.parse(`${to}T00:00:00Z`) - Date.parse(`${from}T00:00:00Z`)) / DAY_MS) + 1;
}

/** GET /v1/usage: UTC days `from` through `to`, both included, at most MAX_USAGE_DAYS. */
export const UsageQuerySchema = z
  .object({ from: daySchema, to: daySchema })
  .refine((q) => q.from <= q.to, { message: "from must not be after to", path: ["from"] })
  .refine((q) => daysInRange(q.from, q.to) <= MAX_USAGE_DAYS, {
    message: `the range must span at most ${MAX_USAGE_DAYS} days`,
    path: ["to"],
  });

export const UsageDaySchema = z.object({
  /** The UTC day, YYYY-MM-DD. */
  day: z.string(),
  model: z.string(),
  prompt_tokens: z.number().int().min(0),
  completion_tokens: z.number().int().min(0),
  model_calls: z.number().int().min(0),
  /** Some call's tokens were estimated because its provider reported none. */
  estimated: z.boolean(),
  /** US dollars the day's calls cost at the registry's prices when they were made; null: none was priced. */
  cost_usd: z.number().min(0).nullable(),
});
const LatencyPercentilesSchema = z.object({
  /** Jobs of the range that have this latency (the later fact is set). */
  jobs: z.number().int().min(0),
  /** ms, a job's own value (percentile_disc); null when no job has it. */
  p50: z.number().nullable(),
  p95: z.number().nullable(),
  p99: z.number().nullable(),
});

/**
 * Days with usage only, oldest first, then by model; then, for the same days, what the console's
 * usage page draws (src/db/usage-repo.ts usageHealth): the budget, spend per day, agent and model,
 * jobs per hour by state, latency percentiles and the top error codes.
 */
export const UsageAnswerSchema = z.object({
  from: z.string(),
  to: z.string(),
  usage: z.array(UsageDaySchema),
  /** The tenant's daily budget in US dollars per UTC day (docs/limits.md), or null: none. */
  daily_budget_usd: z.number().min(0).nullable(),
  /** Cost per UTC day, agent and model; `agent` null: the built-in default agent, or a purged job's calls. */
  spend: z.array(
    z.object({
      day: z.string(),
      agent: z.string().nullable(),
      model: z.string(),
      model_calls: z.number().int().min(0),
      cost_usd: z.number().min(0).nullable(),
    }),
  ),
  /** Jobs created in each UTC hour (ISO, `…T13:00:00Z`) by the state they are in now; hours with jobs only. */
  jobs_per_hour: z.array(z.object({ hour: z.string(), state: z.enum(JOB_STATES), jobs: z.number().int().min(1) })),
  /** Over the jobs created in the range, as GET /v1/jobs/{id} derives each (created → started, first output, finished). */
  latency: z.object({
    dispatch_ms: LatencyPercentilesSchema,
    first_output_ms: LatencyPercentilesSchema,
    total_ms: LatencyPercentilesSchema,
  }),
  /** The most frequent error codes of the range's jobs that ended with one, most first (at most 10). */
  errors: z.array(z.object({ code: z.string(), jobs: z.number().int().min(1) })),
});
export type UsageAnswer = z.infer<typeof UsageAnswerSchema>;
