/**
 * One recovery pass, the same in every host's reaper (sandbox-host/reaper/reaper.ts) and in the
 * Worker's cron backstop (workers/cron/reaper-backstop.ts), so the two cannot drift apart:
 *  1. release claims that never reached `started` within the claim timeout (re-queued);
 *  2. end waits past their deadline as the agent configured (denied and re-queued, or failed
 *     `approval_expired`);
 *  3. mark overdue runs `timed_out`, and silent runs (their owner stopped heartbeating) either
 *     `recovered`, re-queued for a new execution that continues from the journal, when their
 *     agent's `recovery` allows it, or `lost` (an execution is never re-run; reaper-repo.ts).
 * What 1, 2 and 3 re-queued is handed to `reindex` (the ready index in Redis, which src/db may not
 * reach: the caller brings it). That is only an accelerator, the jobs are claimable in Postgres
 * already, so its failure is logged and the pass goes on.
 *
 * Every step is one conditional UPDATE that re-checks its condition on the row it changes, against
 * Postgres' own clock (`now()`), so any number of hosts and the cron may run passes at once: each
 * row changes at most once, and a pass with nothing to do changes nothing. No clock is passed in
 * for the same reason: one clock for the whole fleet, the database's.
 */
import type { Db } from "./client";
import { type ReapState, reapRuns, releaseStaleClaims } from "./reaper-repo";
import { expireWaits } from "./wait-repo";

export interface RecoveryLimits {
  /** A claim not started within this is released (src/domain/recovery.ts has the default). */
  claimTimeoutMs: number;
  /** A running job whose heartbeat is older than this is recovered or `lost`. */
  runLostAfterMs: number;
}

export type RequeuedJob = { id: string; createdAt: Date };
export type ReapedRun = { id: string; state: ReapState; executionId: string };

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
  const said = { lost: "lost (owner stopped heartbeating)", timed_out: "timed out", recovered: "recovered" } as const;
  for (const r of reaped) {
    log.warn(
      r.state === "recovered"
        ? "run's owner stopped heartbeating; job re-queued for a new execution from its journal"
        : `run ${said[r.state]}`,
      { job_id: r.id, execution_id: r.executionId },
    );
  }
  await requeue(reaped.filter((r) => r.state === "recovered"));
  return {
    released,
    waitsDenied: expired.requeued,
    waitsFailed: expired.failed,
    reaped: reaped.map(({ id, state, executionId }) => ({ id, state, executionId })),
  };
}
