/**
 * The queue's depth per tenant, for autoscaling: jobs waiting for a run slot (queued, no owner)
 * and how long the oldest of them has waited. One grouped statement whose WHERE is exactly the
 * predicate of the partial index jobs_ready_idx, so Postgres walks only the waiting jobs, never
 * the finished history; its cost grows with the number waiting (measured in
 * sandbox-host/metrics/queue-depth.ts). The age is computed by Postgres's clock, so a host with a
 * skewed clock still reports the same number as the others.
 */
import { sql } from "drizzle-orm";
import { type Db, resultRows } from "./client";

export interface TenantQueueDepth {
  tenantId: string;
  /** Queued jobs no host has claimed yet. */
  waiting: number;
  /** Seconds since the oldest of them was created. */
  oldestAgeSeconds: number;
}

/** Exported so the test can EXPLAIN exactly this statement. */
export const QUEUE_DEPTH_SQL = sql`
    select tenant_id,
           count(*)::int as waiting,
           extract(epoch from (now() - min(created_at)))::float8 as oldest_age_s
      from jobs
     where state = 'queued' and owner is null
     group by tenant_id`;

export async function queueDepthByTenant(db: Db): Promise<TenantQueueDepth[]> {
  const result = await db.execute(QUEUE_DEPTH_SQL);
  return resultRows<{ tenant_id: string; waiting: number; oldest_age_s: number }>(result).map((r) => ({
    tenantId: r.tenant_id,
    waiting: Number(r.waiting),
    oldestAgeSeconds: Math.max(0, Number(r.oldest_age_s)),
  }));
}
