/**
 * A tenant's model usage per UTC day and model (GET /v1/usage), summed from model_usage: one row
 * per model call, written by the host that made it. Read by the (tenant_id, created_at) index.
 */
import { sql } from "drizzle-orm";
import type { z } from "zod";
import type { UsageAnswer, UsageDaySchema } from "../contracts/catalog";
import type { JobState } from "../contracts/job-state";
import { type Db, resultRows } from "./client";

export type UsageDay = z.infer<typeof UsageDaySchema>;

/** Days `from` through `to` (YYYY-MM-DD, both included, UTC), oldest first, then by model. */
export async function usageByDay(db: Db, tenantId: string, from: string, to: string): Promise<UsageDay[]> {
  const rows = resultRows<Record<string, unknown>>(
    await db.execute(sql`
      SELECT to_char(created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD') AS day, model,
        sum(prompt_tokens) AS prompt_tokens, sum(completion_tokens) AS completion_tokens,
        count(*) AS model_calls, bool_or(estimated) AS estimated, sum(cost_usd) AS cost_usd
      FROM model_usage
      WHERE tenant_id = ${tenantId}
        AND created_at >= (${from}::date)::timestamp AT TIME ZONE 'UTC'
        AND created_at < (${to}::date + 1)::timestamp AT TIME ZONE 'UTC'
      GROUP BY 1, 2
      ORDER BY 1, 2`),
  );
  // sum() and count() are bigint, which the drivers hand over as strings.
  return rows.map((r) => ({
    day: String(r.day),
    model: String(r.model),
    prompt_tokens: Number(r.prompt_tokens),
    completion_tokens: Number(r.completion_tokens),
    model_calls: Number(r.model_calls),
    estimated: r.estimated === true,
    // numeric too; sum() over only unpriced calls is NULL, which stays null (no price, not free).
    cost_usd: r.cost_usd === null || r.cost_usd === undefined ? null : Number(r.cost_usd),
  }));
}

export type UsageHealth = Pick<UsageAnswer, "daily_budget_usd" | "spend" | "jobs_per_hour" | "latency" | "errors">;

/** The percentiles GET /v1/usage reports for each latency. */
const PERCENTILES = [0.5, 0.95, 0.99] as const;
/** How many error codes `errors` lists, most frequent first. */
export const TOP_ERRORS = 10;

/**
 * What the console's usage page draws beside the tokens, for the same UTC days: the tenant's daily
 * budget; spend per day, agent and model (model_usage joined to its job for the agent; a purged
 * job's calls keep their cost under agent null, like the default agent's); the jobs created per
 * UTC hour by their state now; the dispatch, first-output and total latency percentiles of those
 * jobs (as GET /v1/jobs/{id} derives them: ms between the facts, so the same numbers); the most
 * frequent error codes of those that failed. The jobs are read by jobs_tenant_created_idx, the
 * calls by model_usage_tenant_created_idx.
 */
export async function usageHealth(db: Db, tenantId: string, from: string, to: string): Promise<UsageHealth> {
  const range = (col: ReturnType<typeof sql.raw>) => sql`${col} >= (${from}::date)::timestamp AT TIME ZONE 'UTC'
        AND ${col} < (${to}::date + 1)::timestamp AT TIME ZONE 'UTC'`;
  const budget = resultRows<{ budget: unknown }>(
    await db.execute(sql`SELECT daily_budget_usd AS budget FROM tenants WHERE id = ${tenantId}`),
  )[0]?.budget;
  const spend = resultRows<Record<string, unknown>>(
    await db.execute(sql`
      SELECT to_char(u.created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD') AS day, j.agent_name AS agent, u.model,
        count(*) AS model_calls, sum(u.cost_usd) AS cost_usd
      FROM model_usage u LEFT JOIN jobs j ON j.id = u.job_id
      WHERE u.tenant_id = ${tenantId} AND ${range(sql.raw("u.created_at"))}
      GROUP BY 1, 2, 3
      ORDER BY 1, 2 NULLS FIRST, 3`),
  );
  const hours = resultRows<Record<string, unknown>>(
    await db.execute(sql`
      SELECT to_char(date_trunc('hour', created_at AT TIME ZONE 'UTC'), 'YYYY-MM-DD"T"HH24:00:00"Z"') AS hour,
        state, count(*) AS jobs
      FROM jobs
      WHERE tenant_id = ${tenantId} AND ${range(sql.raw("created_at"))}
      GROUP BY 1, 2
      ORDER BY 1, 2`),
  );
  const ms = (a: string, b: string) => sql.raw(`round(extract(epoch from (${b} - ${a})) * 1000)`);
  const pct = (a: string, b: string) =>
    sql`percentile_disc(ARRAY[${sql.raw(PERCENTILES.join(","))}]::float8[]) WITHIN GROUP (ORDER BY ${ms(a, b)}) FILTER (WHERE ${sql.raw(b)} IS NOT NULL)`;
  const lat = resultRows<Record<string, unknown>>(
    await db.execute(sql`
      SELECT ${pct("created_at", "started_at")} AS dispatch, count(started_at) AS dispatch_n,
        ${pct("created_at", "first_output_at")} AS first_output, count(first_output_at) AS first_output_n,
        ${pct("created_at", "finished_at")} AS total, count(finished_at) AS total_n
      FROM jobs
      WHERE tenant_id = ${tenantId} AND ${range(sql.raw("created_at"))}`),
  )[0] as Record<string, unknown>;
  const errors = resultRows<Record<string, unknown>>(
    await db.execute(sql`
      SELECT error->>'code' AS code, count(*) AS jobs
      FROM jobs
      WHERE tenant_id = ${tenantId} AND ${range(sql.raw("created_at"))} AND error IS NOT NULL
      GROUP BY 1
      ORDER BY 2 DESC, 1
      LIMIT ${TOP_ERRORS}`),
  );
  const percentiles = (v: unknown, n: unknown) => {
    // node-postgres parses a numeric[] as strings, the HTTP driver as a '{…}' literal or numbers.
    const arr = Array.isArray(v) ? v : typeof v === "string" ? v.replace(/[{}]/g, "").split(",") : null;
    const at = (i: number) =>
      arr && arr[i] !== null && arr[i] !== undefined && arr[i] !== "NULL" ? Number(arr[i]) : null;
    return { jobs: Number(n), p50: at(0), p95: at(1), p99: at(2) };
  };
  return {
    daily_budget_usd: budget === null || budget === undefined ? null : Number(budget),
    spend: spend.map((r) => ({
      day: String(r.day),
      agent: r.agent === null || r.agent === undefined ? null : String(r.agent),
      model: String(r.model),
      model_calls: Number(r.model_calls),
      cost_usd: r.cost_usd === null || r.cost_usd === undefined ? null : Number(r.cost_usd),
    })),
    jobs_per_hour: hours.map((r) => ({
      hour: String(r.hour),
      state: String(r.state) as JobState,
      jobs: Number(r.jobs),
    })),
    latency: {
      dispatch_ms: percentiles(lat.dispatch, lat.dispatch_n),
      first_output_ms: percentiles(lat.first_output, lat.first_output_n),
      total_ms: percentiles(lat.total, lat.total_n),
    },
    errors: errors.map((r) => ({ code: String(r.code), jobs: Number(r.jobs) })),
  };
}
