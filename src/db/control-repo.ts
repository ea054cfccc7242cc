/**
 * The durable half of cancellation (ARCHITECTURE "Cancellation"): commit the request in Postgres
 * first. A queued job nobody has claimed is cancelled right here (terminal, never starts); a
 * claimed or running job gets `cancel_requested_at` and its owner stops it (a claimed job whose
 * cancel is requested never starts: the host checks before its started CAS, and the reaper's
 * release does not re-queue it). The Redis hint that makes the owner notice fast is the caller's
 * second step.
 */
import { sql } from "drizzle-orm";
import type { Db } from "./client";
import { resultRows } from "./client";
import { isJobId } from "./jobs-repo";

export type CancelStatus = "cancelled" | "requested" | "already_finished" | "not_found";

export async function requestCancel(db: Db, tenantId: string, jobId: string): Promise<CancelStatus> {
  if (!isJobId(jobId)) return "not_found";
  const rows = resultRows<{ outcome: CancelStatus }>(
    await db.execute(sql`
      WITH target AS (
        SELECT id, state, owner FROM jobs WHERE id = ${jobId} AND tenant_id = ${tenantId} FOR UPDATE
      ), cancelled AS (
        UPDATE jobs SET state = 'cancelled', cancel_requested_at = coalesce(jobs.cancel_requested_at, now()),
          finished_at = now(), error = jsonb_build_object('code', 'cancelled', 'message', 'cancelled before it started')
        FROM target WHERE jobs.id = target.id AND target.state = 'queued' AND target.owner IS NULL
        RETURNING jobs.id
      ), requested AS (
        UPDATE jobs SET cancel_requested_at = coalesce(jobs.cancel_requested_at, now())
        FROM target WHERE jobs.id = target.id
          AND (target.state = 'running' OR (target.state = 'queued' AND target.owner IS NOT NULL))
        RETURNING jobs.id
      )
      SELECT CASE
        WHEN EXISTS (SELECT 1 FROM cancelled) THEN 'cancelled'
        WHEN EXISTS (SELECT 1 FROM requested) THEN 'requested'
        WHEN EXISTS (SELECT 1 FROM target) THEN 'already_finished'
        ELSE 'not_found' END AS outcome`),
  );
  return rows[0]?.outcome ?? "not_found";
}
