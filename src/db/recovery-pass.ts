/**
 * One recovery pass, the same in every host's reaper (sandbox-host/reaper/reaper.ts) and in the
 * Worker's cron backstop (workers/cron/reaper-backstop.ts), so the two cannot drift apart:
 *  1. release claims that never reached `started` within the claim timeout (re-queued);
 *  2. end waits past their deadline as the agent configured (denied and re-queued, or failed
 *     `approval_expired`);
 *  3. mark silent runs `lost` and overdue runs `timed_out` (never re-run).
 * What 1 and 2 re-queued is handed to `reindex` (the ready index in Redis, which src/db may not
 * reach: the caller brings it). That is only an accelerator, the jobs are claimable in Postgres
 * already, so its failure is logged and the pass goes on to step 3.
 *
 * Every step is one conditional UPDATE that re-checks its condition on the row it changes, against
 * Postgres' own clock (`now()`), so any number of hosts and the cron may run passes at once: each
 * row changes at most once, and a pass with nothing to do changes nothing. No clock is passed in
 * for the same reason: one clock for the whole fleet, the database's.
 */
import type { Db } from "./client";
import { reapRuns, releaseStaleClaims } from "./reaper-repo";
import { expireWaits } from "./wait-repo";

export interface RecoveryLimits {
  /** A claim not started within this is released (src/domain/recovery.ts has the default). */
  claimTimeoutMs: number;
  /** A running job whose heartbeat is older than this is `lost`. */
  runLostAfterMs: number;
}

export type RequeuedJob = { id: string; createdAt: Date };
export type ReapedRun = { id: string; state: "lost" | "timed_out"; executionId: string };

/** The part of a host's or the Worker's logger the pass writes to. */
export interface RecoveryLog {
  info(msg: string, fields?: Record<string, unknown>): void;
  warn(msg: string, fields?: Record<string, unknown>): void;
}

export interface RecoveryPassOptions {
  db: Db;
  limits: RecoveryLimits;
  log: RecoveryLog;
  /** Puts re-queued jobs into the ready index; without it they wait for a claimer's Postgres sweep. */
  reindex?: (jobs: RequeuedJob[]) => Promise<void>;
}

export interface RecoveryOutcome {
  released: RequeuedJob[];
  /** Waits past their deadline that were denied and re-queued. */
  waitsDenied: RequeuedJob[];
  /** Waits past their deadline that failed the job `approval_expired`. */
  waitsFailed: string[];
  reaped: ReapedRun[];
}

/** Runs the three steps in order; a failed statement throws (the caller decides what that means). */
export async function recoveryPass({ db, limits, log, reindex }: RecoveryPassOptions): Promise<RecoveryOutcome> {
  const requeue = async (jobs: RequeuedJob[]) => {
    if (jobs.length === 0 || !reindex) return;
    try {
      await reindex(jobs);
    } catch (err) {
      log.warn("re-queued jobs not re-indexed", { jobs: jobs.length, error: err instanceof Error ? err.message : err });
    }
  };
  const released = await releaseStaleClaims(db, limits.claimTimeoutMs);
  if (released.length > 0) {
    log.warn("released claims that never started", { jobs: released.map((r) => r.id) });
    await requeue(released);
  }
  const expired = await expireWaits(db);
  if (expired.requeued.length + expired.failed.length > 0) {
    log.info("waits passed their deadline", { denied: expired.requeued.map((r) => r.id), failed: expired.failed });
    await requeue(expired.requeued);
  }
  const reaped = await reapRuns(db, limits.runLostAfterMs);
  for (const r of reaped) {
    log.warn(`run ${r.state === "lost" ? "lost (owner stopped heartbeating)" : "timed out"}`, {
      job_id: r.id,
      execution_id: r.executionId,
    });
  }
  return { released, waitsDenied: expired.requeued, waitsFailed: expired.failed, reaped };
}
