/**
 * The expiry sweep: a queued job that was never claimed by its `expires_at` (submitted with
 * `ttl_s`: the runnable instant + ttl_s) ends `expired`, never started. Its own small statement,
 * run by every host's expiry sweep (sandbox-host/reaper/expiry.ts; idempotent CAS like reaping,
 * apart from the recovery pass on purpose, so changes there leave it alone). The claim statement
 * never takes a job past its `expires_at` (ownership-repo.ts `runnable`), so between the instant
 * and the sweep the job waits, unclaimable, for this. The terminal event `run.expired` is projected from the
 * row like every terminal state a statement writes (workers/durable-objects/job-events).
 */
import { sql } from "drizzle-orm";
import type { Db } from "./client";
import { resultRows, retryOnDeadlock } from "./client";
import { claimable, jobErrorSql } from "./ownership-repo";

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
