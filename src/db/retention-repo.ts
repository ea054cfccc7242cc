/**
 * Retention: finished jobs older than the retention are deleted with their executions and inputs,
 * leaving a tombstone (`purged_jobs`) so a later request for one is 410 Gone, not 404.
 *
 * Safe for any number of callers at once (every host's reaper, a Worker cron backstop): each batch
 * is one statement that locks its rows with FOR UPDATE SKIP LOCKED, so two purgers take disjoint
 * batches and neither waits on the other. Small batches keep each statement's locks and WAL short
 * (a 500-job batch deletes in milliseconds; see docs/architecture.md "Retention").
 */
import { and, eq, sql } from "drizzle-orm";
import type { Db } from "./client";
import { resultRows } from "./client";
import { FINAL_STATES_SQL, purgedJobs } from "./schema";

/** Finished jobs kept by default: a month of history for GET /v1/jobs and the conversation views. */
export const JOB_RETENTION_DEFAULT_S = 30 * 24 * 3600;

export interface PurgeOptions {
  /** Jobs whose finished_at is older than this many ms are deleted. */
  olderThanMs: number;
  /** Jobs per statement. */
  batchSize?: number;
  /** Statements per call: bounds one call's work, the next call continues. */
  maxBatches?: number;
}

/**
 * Delete finished jobs older than `olderThanMs` (oldest first), their executions, job_inputs, job_waits, artifacts and webhook deliveries,
 * and record a tombstone for each. A job whose sandbox cleanup is still pending is kept: the
 * janitor reads its row to know the sandbox may go. Returns how many jobs went, in how many
 * statements; stops at the first batch smaller than `batchSize`.
 */
export async function purgeFinishedJobs(
  db: Db,
  { olderThanMs, batchSize = 500, maxBatches = 10 }: PurgeOptions,
): Promise<{ purged: number; batches: number }> {
  let purged = 0;
  let batches = 0;
  while (batches < maxBatches) {
    batches++;
    // One statement: the child rows, the tombstones and the jobs go together or not at all. The
    // foreign keys are NO ACTION, checked at the end of the statement, when the children are gone.
    const rows = resultRows<{ id: string }>(
      await db.execute(sql`
        WITH doomed AS (
          SELECT id, tenant_id FROM jobs
          WHERE state IN ${FINAL_STATES_SQL} AND finished_at < now() - make_interval(secs => ${olderThanMs / 1000})
            AND NOT cleanup_pending
          ORDER BY finished_at
          LIMIT ${batchSize}
          FOR UPDATE SKIP LOCKED
        ),
        gone_executions AS (DELETE FROM executions WHERE job_id IN (SELECT id FROM doomed)),
        gone_inputs AS (DELETE FROM job_inputs WHERE job_id IN (SELECT id FROM doomed)),
        gone_waits AS (DELETE FROM job_waits WHERE job_id IN (SELECT id FROM doomed)),
        gone_journal AS (DELETE FROM job_journal WHERE job_id IN (SELECT id FROM doomed)),
        -- Their blobs stay until the Worker's cron finds them unreferenced (artifacts-repo.ts).
        gone_artifacts AS (DELETE FROM job_artifacts WHERE job_id IN (SELECT id FROM doomed)),
        gone_deliveries AS (DELETE FROM webhook_deliveries WHERE job_id IN (SELECT id FROM doomed)),
        tombstones AS (
          INSERT INTO purged_jobs (id, tenant_id) SELECT id, tenant_id FROM doomed ON CONFLICT (id) DO NOTHING
        )
        DELETE FROM jobs WHERE id IN (SELECT id FROM doomed)
        RETURNING id`),
    );
    purged += rows.length;
    if (rows.length < batchSize) break;
  }
  return { purged, batches };
}

/** Whether the retention purge deleted this tenant's job (the 410 Gone answer). */
export async function wasPurged(db: Db, tenantId: string, id: string): Promise<boolean> {
  const rows = await db
    .select({ id: purgedJobs.id })
    .from(purgedJobs)
    .where(and(eq(purgedJobs.id, id), eq(purgedJobs.tenantId, tenantId)))
    .limit(1);
  return rows.length > 0;
}
