/**
 * A tenant's model usage per UTC day and model (GET /v1/usage), summed from model_usage: one row
 * per model call, written by the host that made it. Read by the (tenant_id, created_at) index.
 */
import { sql } from "drizzle-orm";
import type { z } from "zod";
import type { UsageDaySchema } from "../contracts/catalog";
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
