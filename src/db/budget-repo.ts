/**
 * A tenant's daily budget (tenants.daily_budget_usd, US dollars per UTC day) against its spend of
 * the day (tenant_daily_spend, moved by every priced call's usage statement in run-repo.ts). The
 * one rule, used by the submit statements, the host's delegations and its model calls: the
 * tenant is refused once the day's spend has reached its budget, until the next UTC midnight.
 * Days are Postgres's (one clock for every gateway isolate and host).
 */
import { type SQL, sql } from "drizzle-orm";
import type { ApiError } from "../contracts/errors";
import { type AdmissionRefusal, admissionError } from "../domain/job-admission";
import { type Db, resultRows } from "./client";

/**
 * True when the tenant has a budget and the day's spend has reached it. A day without spend
 * counts as 0, so a budget of 0 refuses everything (the operator's way to stop a tenant's spend).
 * A primary-key read of each table, cheap enough to gate every submit statement. `tenantId` is
 * a value, or a column of the enclosing statement (`sql\`j.tenant_id\``).
 */
export function overBudgetSql(tenantId: string | SQL) {
  return sql`EXISTS (
    SELECT 1 FROM tenants bt
    LEFT JOIN tenant_daily_spend bs ON bs.tenant_id = bt.id AND bs.day = (now() AT TIME ZONE 'UTC')::date
    WHERE bt.id = ${tenantId} AND bt.daily_budget_usd IS NOT NULL
      AND coalesce(bs.cost_usd, 0) >= bt.daily_budget_usd)`;
}

/** Why a tenant is refused: its budget, the day's spend, and the seconds until the next UTC day. */
export interface BudgetRefusal {
  budgetUsd: number;
  spentUsd: number;
  retryAfterS: number;
}

/** The tenant's refusal, or null while it is under its budget (or has none). */
export async function budgetRefusal(db: Db, tenantId: string): Promise<BudgetRefusal | null> {
  const rows = resultRows<{ budget: string | number; spent: string | number; until_midnight_s: string | number }>(
    await db.execute(sql`
      SELECT t.daily_budget_usd AS budget, coalesce(s.cost_usd, 0) AS spent,
        extract(epoch FROM (date_trunc('day', now() AT TIME ZONE 'UTC') + interval '1 day') - now() AT TIME ZONE 'UTC')
          AS until_midnight_s
      FROM tenants t
      LEFT JOIN tenant_daily_spend s ON s.tenant_id = t.id AND s.day = (now() AT TIME ZONE 'UTC')::date
      WHERE t.id = ${tenantId} AND t.daily_budget_usd IS NOT NULL AND coalesce(s.cost_usd, 0) >= t.daily_budget_usd`),
  );
  const r = rows[0];
  if (!r) return null;
  return { budgetUsd: Number(r.budget), spentUsd: Number(r.spent), retryAfterS: Number(r.until_midnight_s) };
}

/** What a refused submit, chat message or delegation says. */
export function budgetMessage(r: BudgetRefusal): string {
  return `this tenant spent $${r.spentUsd} of its daily budget of $${r.budgetUsd} (UTC day); refused until the next UTC midnight`;
}

/** The admission refusal (check 3, src/domain/job-admission.ts) a spent budget is. */
export function budgetAdmission(r: BudgetRefusal): AdmissionRefusal {
  return { reason: "budget_exceeded", code: "budget_exceeded", message: budgetMessage(r), retryAfterS: r.retryAfterS };
}

/** The API's 429 for a refused submit or chat message: Retry-After runs to the next UTC midnight. */
export function budgetExceeded(r: BudgetRefusal): ApiError {
  return admissionError(budgetAdmission(r));
}
