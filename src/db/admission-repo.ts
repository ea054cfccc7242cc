/**
 * Admission of new jobs (src/domain/job-admission.ts has the rule): the checks that read
 * Postgres, a tenant's daily budget and its queued jobs, as a statement fragment and as a read.
 *
 * The expiry sweep: a queued job that was never claimed by its `expires_at` (submitted with
 * `ttl_s`: the runnable instant + ttl_s) ends `expired`, never started. Its own small statement,
 * run by every host's expiry sweep (sandbox-host/reaper/expiry.ts; idempotent CAS like reaping,
 * apart from the recovery pass on purpose, so changes there leave it alone). The claim statement
 * never takes a job past its `expires_at` (ownership-repo.ts `runnable`), so between the instant
 * and the sweep the job waits, unclaimable, for this. The terminal event `run.expired` is projected from the
 * row like every terminal state a statement writes (workers/durable-objects/job-events).
 */
import { type SQL, sql } from "drizzle-orm";
import {
  type AdmissionRefusal,
  type AdmissionRules,
  type JobPlan,
  planRefusal,
  queueFullRefusal,
} from "../domain/job-admission";
import { budgetAdmission, budgetRefusal } from "./budget-repo";
import type { Db } from "./client";
import { resultRows, retryOnDeadlock } from "./client";
import { claimable, jobErrorSql } from "./ownership-repo";
import { held } from "./schema";

const EXPIRED = jobErrorSql("expired", "the job was not started within its ttl_s");

/** At most this many jobs per statement: a sweep after a long outage stays a short statement. */
export const EXPIRE_BATCH = 500;

/** Ends every overdue unclaimed job `expired`; returns their ids. */
export async function expireOverdue(db: Db): Promise<string[]> {
  const rows = resultRows<{ id: string }>(
    await retryOnDeadlock(() =>
      db.execute(sql`
        UPDATE jobs SET state = 'expired', finished_at = now(), error = ${EXPIRED}
        WHERE id IN (
          SELECT id FROM jobs
          WHERE state = 'queued' AND expires_at IS NOT NULL AND expires_at <= now()
          ORDER BY expires_at LIMIT ${EXPIRE_BATCH}
          FOR UPDATE SKIP LOCKED
        ) AND ${claimable()} AND started_at IS NULL AND expires_at <= now()
        RETURNING id`),
    ),
  );
  return rows.map((r) => r.id);
}

/**
 * How many jobs the tenant has `queued` (claimed but not started included), for its queued-jobs
 * limit. Two counts, each an exact partial-index predicate: the unclaimed ones walk
 * jobs_admission_idx, the claimed ones jobs_held_idx (at most the tenant's held jobs, read
 * through to the row for `state`). An index of `state = 'queued'` alone would serve one count,
 * but every claim added an entry to it (the claim keeps `queued` and sets `owner`, a non-HOT
 * update): 1 of the ~12.5 index entries a lifecycle wrote, for a count made only when jobs are
 * created (docs/claims.md, "WAL per job"). `tenantId` is a value or a column of the enclosing
 * statement.
 */
export function tenantQueuedSql(tenantId: string | SQL): SQL {
  return sql`((SELECT count(*) FROM jobs WHERE tenant_id = ${tenantId} AND state = 'queued' AND owner IS NULL)
    + (SELECT count(*) FROM jobs WHERE tenant_id = ${tenantId} AND ${held()} AND state = 'queued'))`;
}

/**
 * Job admission's checks 3 and 4 (src/domain/job-admission.ts) inside a creating statement, so
 * no job slips in between a read and the insert: the tenant's queued jobs (`tenantQueuedSql`)
 * plus the `fresh` ones it inserts fit under `maxQueued` (0: no cap).
 * `tenantId` is a value, or a column of the enclosing statement. Under READ COMMITTED concurrent
 * creators do not see each other's rows, so a burst can pass the cap by the number in flight at
 * once: it stops one tenant filling the queue, it is not an exact quota.
 */
export function queueFitsSql(tenantId: string | SQL, maxQueued: number, fresh: number | SQL = 1): SQL {
  const cap = Math.max(maxQueued, 0);
  return sql`(${cap}::int = 0
    OR ${tenantQueuedSql(tenantId)} + ${fresh} <= ${cap}::int)`;
}

/** Checks 3 and 4 as they stand now: the budget's refusal, else the queue's, else null. */
export async function stateRefusal(db: Db, tenantId: string, maxQueued: number): Promise<AdmissionRefusal | null> {
  const budget = await budgetRefusal(db, tenantId);
  if (budget) return budgetAdmission(budget);
  if (maxQueued <= 0) return null;
  const rows = resultRows<{ fits: boolean }>(
    await db.execute(sql`SELECT ${queueFitsSql(tenantId, maxQueued)} AS fits`),
  );
  return rows[0]?.fits === true ? null : queueFullRefusal(maxQueued);
}

/**
 * The whole admission check for a path that reads before it creates (a schedule's tick): the
 * plan's model and tools (no database work), then the tenant's budget and queue. `prefix` names
 * the plan's source in the message (`agent: x@1's `). Null: admitted.
 */
export async function admitJob(
  db: Db,
  rules: AdmissionRules,
  tenantId: string,
  plan: JobPlan,
  prefix = "",
): Promise<AdmissionRefusal | null> {
  return planRefusal(rules.models, tenantId, plan, prefix) ?? (await stateRefusal(db, tenantId, rules.maxQueued));
}
