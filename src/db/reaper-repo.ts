/**
 * Reaping: idempotent CAS SQL that any host, and the Worker's cron backstop, may run at any time,
 * any number of times, concurrently. Each statement re-checks the condition it acts on inside the
 * UPDATE, so two reapers racing, or a reaper racing the owner, cannot both win.
 */
import { sql } from "drizzle-orm";
import { isUuid } from "../domain/uuid";
import type { Db } from "./client";
import { resultRows, retryOnDeadlock } from "./client";
import { SCORING_WORK_EXISTS } from "./evals-repo";
import { CANCELLED_BEFORE_START, claimable, jobErrorSql, RECOVERABLE, REQUEUE_SET } from "./ownership-repo";
import { FINAL_STATES_SQL, held } from "./schema";

const TIMED_OUT = jobErrorSql("timed_out", "the run passed its deadline");
const LOST = jobErrorSql(
  "lost",
  "the run's host stopped heartbeating, and the agent's recovery does not allow another execution",
);

/**
 * A claim that never reached `started` within the claim timeout is released: owner, claimed_at
 * and token are cleared so the job is claimable again (the next claim bumps the epoch). A late
 * started CAS from the old claimant then hits zero rows, because its token no longer matches.
 */
export async function releaseStaleClaims(
  db: Db,
  claimTimeoutMs: number,
): Promise<Array<{ id: string; createdAt: Date }>> {
  // A stale claim whose job was asked to cancel ends `cancelled` instead of going back to the queue.
  const rows = resultRows<{ id: string; created_at: Date | string; state: string }>(
    // Retried on deadlock: the stale claims it cancels may be children (the resume trigger).
    await retryOnDeadlock(() =>
      db.execute(sql`
      UPDATE jobs SET owner = NULL, claimed_at = NULL, token = NULL,
        state = CASE WHEN cancel_requested_at IS NULL THEN 'queued' ELSE 'cancelled' END,
        finished_at = CASE WHEN cancel_requested_at IS NULL THEN NULL ELSE now() END,
        error = CASE WHEN cancel_requested_at IS NULL THEN NULL
          ELSE ${CANCELLED_BEFORE_START} END
      WHERE state = 'queued' AND owner IS NOT NULL AND claimed_at IS NOT NULL
        AND claimed_at < now() - make_interval(secs => ${claimTimeoutMs / 1000})
        AND execution_id IS NULL AND execution_started_at IS NULL
      RETURNING id, created_at, state`),
    ),
  );
  return rows.filter((r) => r.state === "queued").map((r) => ({ id: r.id, createdAt: new Date(r.created_at) }));
}

/**
 * What the reaper does with a running job it reaps: past its deadline it is `timed_out`; silent
 * (its owner stopped heartbeating), it is `recovered` (re-queued for a new execution that
 * continues from the journal) when its agent's `recovery` allows one more, else `lost`.
 */
export type ReapState = "lost" | "timed_out" | "recovered";

/**
 * A running job past its deadline becomes `timed_out`. One whose owner stopped heartbeating is
 * recovered when its agent allows it (RECOVERABLE): back to `queued` with no owner, claim and
 * execution cleared, epoch + 1 (so the dead owner's identity can never match again, even before
 * the next claim), `recoveries` + 1 and `recovery_reason` 'host_lost', for a new execution that
 * rebuilds its conversation from the journal; else it becomes `lost`. An execution is never
 * re-run: the reaped one ends (`executions.outcome` 'lost') either way. The deadline is checked
 * first so a run that is both late and silent reports the stronger fact. Each row is decided and
 * changed in one statement that re-checks the condition (a concurrent pass or owner write that
 * changed the row first makes this one miss it).
 */
export async function reapRuns(
  db: Db,
  heartbeatTimeoutMs: number,
): Promise<Array<{ id: string; state: ReapState; executionId: string; createdAt: Date }>> {
  // Retried on deadlock: marking many runs ends children of several parents (the resume trigger).
  const rows = resultRows<{ id: string; state: ReapState; execution_id: string; created_at: Date | string }>(
    await retryOnDeadlock(() =>
      db.execute(sql`
      WITH due AS (
        SELECT j.id, j.execution_id,
          CASE WHEN j.deadline_at IS NOT NULL AND j.deadline_at < now() THEN 'timed_out'
            WHEN ${RECOVERABLE} THEN 'recovered' ELSE 'lost' END AS outcome
        FROM jobs j
        LEFT JOIN agent_versions v ON v.tenant_id = j.tenant_id AND v.name = j.agent_name AND v.version = j.agent_version
        -- Every running job has an owner (jobs_running_owner_ck); stated so that the plan walks
        -- jobs_held_idx, the held jobs, rather than the job history.
        WHERE j.state = 'running' AND j.owner IS NOT NULL
          AND ((j.deadline_at IS NOT NULL AND j.deadline_at < now())
            OR j.heartbeat_at < now() - make_interval(secs => ${heartbeatTimeoutMs / 1000}))
      ), reaped AS (
        UPDATE jobs SET
          state = CASE due.outcome WHEN 'recovered' THEN 'queued' ELSE due.outcome END,
          finished_at = CASE WHEN due.outcome = 'recovered' THEN NULL ELSE now() END,
          error = CASE due.outcome WHEN 'timed_out' THEN ${TIMED_OUT} WHEN 'lost' THEN ${LOST} END,
          ${REQUEUE_SET},
          recovery_reason = CASE WHEN due.outcome = 'recovered' THEN 'host_lost' ELSE jobs.recovery_reason END
        FROM due
        WHERE jobs.id = due.id AND jobs.state = 'running' AND jobs.execution_id = due.execution_id
          AND ((jobs.deadline_at IS NOT NULL AND jobs.deadline_at < now())
            OR jobs.heartbeat_at < now() - make_interval(secs => ${heartbeatTimeoutMs / 1000}))
        RETURNING jobs.id, due.outcome AS state, due.execution_id, jobs.created_at
      ), recorded AS (
        UPDATE executions SET finished_at = now(),
          outcome = CASE reaped.state WHEN 'timed_out' THEN 'timed_out' ELSE 'lost' END
        FROM reaped WHERE executions.id = reaped.execution_id AND executions.finished_at IS NULL
      )
      SELECT id, state, execution_id, created_at FROM reaped`),
    ),
  );
  return rows.map((r) => ({
    id: r.id,
    state: r.state,
    executionId: r.execution_id,
    createdAt: new Date(r.created_at),
  }));
}

/** What one look at the fleet found (sandbox-host/lifecycle/activity.ts). */
export interface FleetWorkRow {
  waiting: boolean;
  claimed: boolean;
  running: boolean;
  /** Running with an owner other than the host that asked (null: no host asked). */
  runningElsewhere: boolean | null;
  /**
   * Those other owners, at most `ownersAsked` + 1 of them (null: no host asked, or none asked
   * for): whom a host quiet over its runs watches (sandbox-host/lifecycle/held-watch.ts).
   */
  ownersElsewhere: string[] | null;
  expiring: boolean;
  /** A run that is over with its sandbox cleanup fence still set: a janitor's work (a dead host's sandbox). */
  cleanup: boolean;
  /** An eval case whose job ended waits for its scores (evals-repo.ts): a scorer's work. */
  scoring: boolean;
  /**
   * Milliseconds until the soonest thing known to come due (a delayed job's run_at, a queued
   * job's expires_at, a wait's deadline, a schedule tick, a webhook attempt, a finished job past
   * its retention), on Postgres' clock; null when nothing is known to come due. A sleeping host
   * wakes then (lifecycle/sleep.ts).
   */
  nextDueInMs: number | null;
}

/**
 * How long a run that is over keeps the fleet awake while its sandbox fence is set: a janitor
 * (SANDBOX_JANITOR_MS, 30 s) on the sandbox's engine removes it within a pass or two. Past this,
 * the engine is presumably gone for good (a machine that never came back) and no host here can
 * remove it: the fleet may sleep rather than stay awake for it forever.
 */
export const CLEANUP_WORK_WINDOW_S = 600;

/**
 * Whether any job anywhere waits for a claim, is claimed but not started, or runs: an idle host's
 * one look at the fleet (sandbox-host/lifecycle/activity.ts), and when the soonest known deadline
 * falls. One statement: EXISTS probes and min()s, each the first entry of a partial index
 * (jobs_ready_idx, jobs_held_idx, jobs_waiting_deadline_idx,
 * jobs_expiry_idx, jobs_cleanup_pending_idx, schedules_due_idx, webhook_deliveries_due_idx,
 * jobs_finished_idx), so the job
 * history never enters the plan. A job queued with a later run_at, or a wait or a ttl ending
 * later than `deadlineHorizonMs` from now, is not work yet: it is a deadline.
 */
export async function fleetWork(
  db: Db,
  opts: {
    /** A wait, run_at or expiry within this many ms counts as work (`waiting`, `expiring`). */
    deadlineHorizonMs?: number;
    /** JOB_RETENTION_S in ms, to know when the oldest finished job is due for the purge; null: not asked. */
    retentionMs?: number | null;
    /** The asking host: whether a run is held by another host (`runningElsewhere`); null: not asked. */
    hostId?: string | null;
    /** With `hostId`: list up to this many other owners, plus one to tell "more" (0: not asked). */
    ownersAsked?: number;
  } = {},
): Promise<FleetWorkRow> {
  const { deadlineHorizonMs = 0, retentionMs = null, hostId = null, ownersAsked = 0 } = opts;
  const horizon = sql`now() + make_interval(secs => ${deadlineHorizonMs / 1000})`;
  const retention =
    retentionMs === null
      ? sql`NULL::timestamptz`
      : sql`(SELECT min(finished_at) FROM jobs WHERE state IN ${FINAL_STATES_SQL} AND NOT cleanup_pending)
            + make_interval(secs => ${retentionMs / 1000})`;
  const [row] = resultRows<{
    waiting: boolean;
    claimed: boolean;
    running: boolean;
    running_elsewhere: boolean | null;
    owners_elsewhere: string[] | null;
    expiring: boolean;
    cleanup: boolean;
    scoring: boolean;
    next_due_in_ms: number | string | null;
  }>(
    await db.execute(sql`
      SELECT
        EXISTS (SELECT 1 FROM jobs WHERE ${claimable()} AND (run_at IS NULL OR run_at < ${horizon})) AS waiting,
        EXISTS (SELECT 1 FROM jobs WHERE ${held()} AND state = 'queued') AS claimed,
        EXISTS (SELECT 1 FROM jobs WHERE ${held()} AND state = 'running') AS running,
        ${hostId === null ? sql`NULL::boolean` : sql`EXISTS (SELECT 1 FROM jobs WHERE ${held()} AND state = 'running' AND owner <> ${hostId})`} AS running_elsewhere,
        ${
          hostId === null || ownersAsked <= 0
            ? sql`NULL::text[]`
            : sql`ARRAY(SELECT DISTINCT owner FROM jobs WHERE ${held()} AND state = 'running' AND owner <> ${hostId} LIMIT ${ownersAsked + 1})`
        } AS owners_elsewhere,
        (EXISTS (SELECT 1 FROM jobs WHERE state = 'waiting' AND wait_deadline_at < ${horizon})
          OR EXISTS (SELECT 1 FROM jobs WHERE state = 'queued' AND expires_at < ${horizon})
          OR EXISTS (SELECT 1 FROM jobs WHERE ${held()} AND state = 'running' AND deadline_at < ${horizon})) AS expiring,
        EXISTS (SELECT 1 FROM jobs WHERE cleanup_pending AND state <> 'running'
          AND (finished_at IS NULL OR finished_at > now() - make_interval(secs => ${CLEANUP_WORK_WINDOW_S}))) AS cleanup,
        ${SCORING_WORK_EXISTS} AS scoring,
        extract(epoch FROM least(
          (SELECT min(run_at) FROM jobs WHERE ${claimable()}),
          (SELECT min(expires_at) FROM jobs WHERE state = 'queued' AND expires_at IS NOT NULL),
          (SELECT min(wait_deadline_at) FROM jobs WHERE state = 'waiting'),
          (SELECT min(greatest(next_run_at, retry_at)) FROM schedules WHERE enabled),
          (SELECT min(next_attempt_at) FROM webhook_deliveries WHERE state = 'pending'),
          ${retention}
        ) - now()) * 1000 AS next_due_in_ms`),
  );
  const due = row?.next_due_in_ms;
  return {
    waiting: row?.waiting === true,
    claimed: row?.claimed === true,
    running: row?.running === true,
    runningElsewhere: hostId === null ? null : row?.running_elsewhere === true,
    ownersElsewhere: row?.owners_elsewhere ?? null,
    expiring: row?.expiring === true,
    cleanup: row?.cleanup === true,
    scoring: row?.scoring === true,
    nextDueInMs: due === null || due === undefined ? null : Math.max(0, Number(due)),
  };
}

/** Queued, ownerless jobs (oldest first), with their run_at: what the ready index should hold. */
export async function readyJobs(
  db: Db,
  limit: number,
): Promise<Array<{ id: string; createdAt: Date; runAt: Date | null }>> {
  const rows = resultRows<{ id: string; created_at: Date | string; run_at: Date | string | null }>(
    await db.execute(sql`
      SELECT id, created_at, run_at FROM jobs
      WHERE ${claimable()}
      ORDER BY created_at LIMIT ${limit}`),
  );
  return rows.map((r) => ({
    id: r.id,
    createdAt: new Date(r.created_at),
    runAt: r.run_at === null ? null : new Date(r.run_at),
  }));
}

/**
 * Of these execution ids (sandbox labels found on a Docker engine), the ones this database knows
 * and whose run is over: the job is no longer running under that execution. Ids it does not know
 * (another deployment sharing the engine, garbage labels) are never returned, so nothing that
 * might still be someone's is called finished.
 */
export async function finishedExecutions(db: Db, executionIds: string[]): Promise<Set<string>> {
  const ids = executionIds.filter(isUuid);
  if (ids.length === 0) return new Set();
  const rows = resultRows<{ id: string }>(
    await db.execute(sql`
      SELECT e.id FROM executions e JOIN jobs j ON j.id = e.job_id
      WHERE e.id = ANY(string_to_array(${ids.join(",")}, ',')::uuid[])
        AND NOT (j.state = 'running' AND j.execution_id = e.id)`),
  );
  return new Set(rows.map((r) => r.id));
}

/**
 * The sandboxes of these executions are gone: clear their jobs' cleanup fences where the job is
 * not running. A job is found by its current execution or, once it continued in a new execution
 * after a recovery or a hand-off (its row names the new one, or none while queued), by the
 * `executions` row of the old one. Returns the ids whose job still runs (under them: a sandbox
 * removed at host start before the reaper called the run over; or under a newer execution,
 * whose own sandbox the fence may now guard): their fences can only be cleared once the job is
 * not running, so the caller asks again later. Every other id is settled: cleared now, already
 * clear, or unknown here.
 */
export async function clearCleanupFences(
  db: Db,
  executionIds: string[],
): Promise<{ cleared: number; running: string[] }> {
  const ids = executionIds.filter(isUuid);
  if (ids.length === 0) return { cleared: 0, running: [] };
  const list = sql`string_to_array(${ids.join(",")}, ',')::uuid[]`;
  // One statement: the SELECT sees the snapshot from before the UPDATE, which changes no state.
  const rows = resultRows<{ id: string; running: boolean }>(
    await db.execute(sql`
      WITH mine AS (
        SELECT id AS execution_id, job_id FROM executions WHERE id = ANY(${list})
        UNION
        SELECT execution_id, id FROM jobs WHERE execution_id = ANY(${list})
      ), cleared AS (
        UPDATE jobs SET cleanup_pending = false
        FROM mine WHERE jobs.id = mine.job_id AND jobs.state <> 'running' AND jobs.cleanup_pending
        RETURNING jobs.id
      )
      SELECT DISTINCT id::text AS id, false AS running FROM cleared
      UNION ALL
      SELECT DISTINCT mine.execution_id::text AS id, true AS running FROM mine JOIN jobs ON jobs.id = mine.job_id
      WHERE jobs.state = 'running'`),
  );
  return { cleared: rows.filter((r) => !r.running).length, running: rows.filter((r) => r.running).map((r) => r.id) };
}
