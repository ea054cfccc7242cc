/**
 * Schedules (src/contracts/schedule.ts) and the firing of their ticks.
 *
 * Firing is exactly once per tick however many firers race (every host's scheduler,
 * sandbox-host/scheduler/schedule-ticker.ts, and the Worker's cron, workers/cron/schedule-backstop.ts):
 * one statement per tick whose first step is the UPDATE that moves `next_run_at` from the tick
 * the firer read to the one after it. That UPDATE takes the row lock and re-checks `next_run_at`
 * and `enabled` after any wait, so of all firers that read the same tick exactly one changes the
 * row, and only its statement goes on to INSERT the job; the others change nothing. The job row
 * carries (schedule_id, scheduled_for), unique (jobs_schedule_tick_uq), so even a tick that comes
 * round again (a PATCH that set the same next tick) cannot make a second job. A firer killed
 * mid-statement committed nothing (one statement is one transaction), and Redis plays no part.
 */
import { type SQL, sql } from "drizzle-orm";
import { agentModels, agentPriority, parseAgentRef } from "../contracts/agent";
import type { CatchUp, ScheduleView } from "../contracts/schedule";
import { toolNames } from "../domain/approval";
import type { AdmissionRefusal, AdmissionRules } from "../domain/job-admission";
import { retryDelayMs, ScheduleClockError, tickToFire } from "../domain/schedule-time";
import { isUuid } from "../domain/uuid";
import { admitJob, queueFitsSql } from "./admission-repo";
import { getAgentVersion } from "./agents-repo";
import { overBudgetSql } from "./budget-repo";
import { type Db, resultCount, resultRows } from "./client";
import { jobs, type ScheduleRow } from "./schema";

interface RawSchedule {
  id: string;
  tenant_id: string;
  cron: string;
  timezone: string;
  agent: string | null;
  input: ScheduleView["input"] | string;
  metadata: Record<string, unknown> | string;
  enabled: boolean;
  catch_up: CatchUp;
  next_run_at: string | null;
  last_run_at: string | null;
  last_error: string | null;
  created_at: string;
  updated_at: string;
}

const iso = (column: SQL) => sql`to_char(${column} at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"')`;

const COLUMNS = sql`id, tenant_id, cron, timezone, agent, input, metadata, enabled, catch_up,
  ${iso(sql`next_run_at`)} AS next_run_at, ${iso(sql`last_run_at`)} AS last_run_at, last_error,
  ${iso(sql`created_at`)} AS created_at, ${iso(sql`updated_at`)} AS updated_at`;

const json = <T>(v: T | string): T => (typeof v === "string" ? (JSON.parse(v) as T) : v);

function toView(r: RawSchedule): ScheduleView {
  return {
    id: r.id,
    cron: r.cron,
    timezone: r.timezone,
    agent: r.agent,
    input: json(r.input),
    metadata: json(r.metadata),
    enabled: r.enabled,
    catch_up: r.catch_up,
    next_run_at: r.next_run_at,
    last_run_at: r.last_run_at,
    last_error: r.last_error,
    created_at: r.created_at,
    updated_at: r.updated_at,
  };
}

/** What a schedule is made of (the body with its defaults applied), and its first tick. */
export interface ScheduleFields {
  cron: string;
  timezone: string;
  agent: string | null;
  input: ScheduleView["input"];
  metadata: Record<string, unknown>;
  enabled: boolean;
  catchUp: CatchUp;
  /** Null when disabled or when the cron never fires again. */
  nextRunAt: Date | null;
}

/** A new schedule, or null when the tenant already has `maxPerTenant` (counted in the INSERT's own statement). */
export async function createSchedule(
  db: Db,
  tenantId: string,
  f: ScheduleFields,
  maxPerTenant: number,
): Promise<ScheduleView | null> {
  const rows = resultRows<RawSchedule>(
    await db.execute(sql`
      INSERT INTO schedules (id, tenant_id, cron, timezone, agent, input, metadata, enabled, catch_up, next_run_at)
      SELECT ${crypto.randomUUID()}::uuid, ${tenantId}, ${f.cron}, ${f.timezone}, ${f.agent},
        ${JSON.stringify(f.input)}::jsonb, ${JSON.stringify(f.metadata)}::jsonb, ${f.enabled}, ${f.catchUp},
        ${f.nextRunAt?.toISOString() ?? null}::timestamptz
      WHERE (SELECT count(*) FROM schedules WHERE tenant_id = ${tenantId}) < ${maxPerTenant}::int
      RETURNING ${COLUMNS}`),
  );
  return rows[0] ? toView(rows[0]) : null;
}

export async function getSchedule(db: Db, tenantId: string, id: string): Promise<ScheduleView | null> {
  if (!isUuid(id)) return null;
  const rows = resultRows<RawSchedule>(
    await db.execute(sql`SELECT ${COLUMNS} FROM schedules WHERE tenant_id = ${tenantId} AND id = ${id}::uuid`),
  );
  return rows[0] ? toView(rows[0]) : null;
}

/** Every schedule of the tenant, oldest first (at most SCHEDULE_LIMITS.maxSchedulesPerTenant). */
export async function listSchedules(db: Db, tenantId: string): Promise<ScheduleView[]> {
  const rows = resultRows<RawSchedule>(
    await db.execute(sql`SELECT ${COLUMNS} FROM schedules WHERE tenant_id = ${tenantId} ORDER BY created_at, id`),
  );
  return rows.map(toView);
}

/** Replace the editable fields (the route merged the patch onto the row it read); null when gone. */
export async function updateSchedule(
  db: Db,
  tenantId: string,
  id: string,
  f: Omit<ScheduleFields, "agent">,
): Promise<ScheduleView | null> {
  if (!isUuid(id)) return null;
  const rows = resultRows<RawSchedule>(
    await db.execute(sql`
      UPDATE schedules SET cron = ${f.cron}, timezone = ${f.timezone}, input = ${JSON.stringify(f.input)}::jsonb,
        metadata = ${JSON.stringify(f.metadata)}::jsonb, enabled = ${f.enabled}, catch_up = ${f.catchUp},
        next_run_at = ${f.nextRunAt?.toISOString() ?? null}::timestamptz, updated_at = now(),
        -- A changed next tick (a new cron, timezone or enabled) is owed afresh: no retry delay left
        -- from failures to fire the old one (last_error stays until a tick fires).
        retry_at = CASE WHEN next_run_at IS DISTINCT FROM ${f.nextRunAt?.toISOString() ?? null}::timestamptz
          THEN NULL ELSE retry_at END,
        failures = CASE WHEN next_run_at IS DISTINCT FROM ${f.nextRunAt?.toISOString() ?? null}::timestamptz
          THEN 0 ELSE failures END
      WHERE tenant_id = ${tenantId} AND id = ${id}::uuid
      RETURNING ${COLUMNS}`),
  );
  return rows[0] ? toView(rows[0]) : null;
}

export async function deleteSchedule(db: Db, tenantId: string, id: string): Promise<boolean> {
  if (!isUuid(id)) return false;
  return (
    resultCount(await db.execute(sql`DELETE FROM schedules WHERE tenant_id = ${tenantId} AND id = ${id}::uuid`)) > 0
  );
}

/** How many due schedules one pass reads (the rest are next pass's, a few hundred ms later). */
const DUE_BATCH = 100;

/**
 * What `last_error` says when a tick failed for a reason other than its clock (a database read or
 * write): the tenant sees that it failed and is retried, not the database's message (which may
 * name internals); the host's log has the error itself.
 */
const FIRE_FAILED = "the tick could not be fired (a database read or write failed); it is tried again";

export interface FiredTick {
  scheduleId: string;
  /** The tick a job was made for; null when the tick was skipped (catch_up none, agent gone, refused). */
  scheduledFor: Date | null;
  jobId: string | null;
  /** The tick owed next. */
  next: Date | null;
  /** Why job admission refused the tick's job (src/domain/job-admission.ts); null when it did not. */
  refused: AdmissionRefusal | null;
}

export interface FireLog {
  warn(msg: string, fields?: Record<string, unknown>): void;
}

/** `next_iso`: the tick read, to the microsecond, for the firing statement's compare-and-set. */
type DueRow = ScheduleRow & { next_iso: string };

/**
 * A tick as the compare-and-set reads it back: every digit Postgres keeps. At milliseconds (the
 * view's precision) a row whose tick has microseconds (one not written by the gateway or a firer)
 * never matches, never fires and stays first in the due read.
 */
const exact = (column: SQL) => sql`to_char(${column} at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')`;

/**
 * Fire every due tick once: read the enabled schedules whose `next_run_at` has come and whose
 * retry delay (if a try failed) is over, by Postgres' clock (the fleet's one clock), then one
 * statement per schedule (see the file comment). Returns the ticks this caller fired (a tick
 * another firer won is not in the list) and how long until the soonest tick or retry ahead
 * (Postgres' clock), so a scheduler can sleep until then.
 *
 * The due read is fair across tenants: it takes every tenant's most overdue schedule before any
 * tenant's second (round-robin by tenant, oldest first within a round), so one tenant's hundred
 * due schedules cannot keep another's one due tick out of the batch. A schedule that fails to
 * fire is pushed back by a growing delay with its `last_error` set (pushBack), so it leaves the
 * due read until then instead of coming back first at every pass.
 * Each tick's job is admitted by the same check as a submit's, with the firer's `rules` (the
 * hosts' and the Worker's models and queued-jobs cap): a refused tick makes no job (see fireOne).
 */
export async function fireDueSchedules(
  db: Db,
  rules: AdmissionRules,
  log?: FireLog,
): Promise<{ fired: FiredTick[]; nextInMs: number | null }> {
  // One statement when nothing is due (the common pass): the soonest tick ahead comes with it.
  const rows = resultRows<DueRow & { db_now: string | Date; soonest: string | Date | null }>(
    await db.execute(sql`
      SELECT m.db_now, m.soonest, d.* FROM (
        -- The soonest ahead as the first entry of the due index past now (a min() over the
        -- enabled rows read every one of them).
        SELECT now() AS db_now, (
          SELECT greatest(next_run_at, retry_at) FROM schedules
          WHERE enabled AND greatest(next_run_at, retry_at) > now()
          ORDER BY greatest(next_run_at, retry_at) LIMIT 1
        ) AS soonest
      ) m LEFT JOIN LATERAL (
        SELECT id, "tenantId", cron, timezone, agent, "catchUp", "nextRunAt", next_iso, failures FROM (
          SELECT id, tenant_id AS "tenantId", cron, timezone, agent, catch_up AS "catchUp",
            next_run_at AS "nextRunAt", ${exact(sql`next_run_at`)} AS next_iso, failures,
            greatest(next_run_at, retry_at) AS due_at,
            row_number() OVER (PARTITION BY tenant_id ORDER BY greatest(next_run_at, retry_at), id) AS round
          FROM schedules WHERE enabled AND greatest(next_run_at, retry_at) <= now()
        ) due
        ORDER BY round, due_at, id LIMIT ${DUE_BATCH}
      ) d ON true`),
  );
  const head = rows[0];
  const now = new Date(head?.db_now ?? Date.now());
  const fired: FiredTick[] = [];
  let soonest = head?.soonest ? new Date(head.soonest).getTime() : null;
  const sooner = (at: Date | null) => {
    if (at) soonest = Math.min(soonest ?? Number.POSITIVE_INFINITY, at.getTime());
  };
  for (const s of rows) {
    if (!s.id) continue;
    let outcome: Awaited<ReturnType<typeof fireOne>>;
    try {
      outcome = await fireOne(db, s, now, rules, log);
    } catch (err) {
      // One schedule's failure (its clock, its agent read, its statement) must not starve the
      // others behind it, nor take a place in every later batch: it is tried again after a delay.
      sooner(await pushBack(db, s, err, log));
      continue;
    }
    const { fired: tick, next } = outcome;
    if (tick) fired.push(tick);
    // Whoever won the tick, the one after it is the same: a firer that lost the race sleeps until then too.
    sooner(next);
  }
  return { fired, nextInMs: soonest === null ? null : Math.max(0, soonest - now.getTime()) };
}

/**
 * A schedule whose tick failed to fire: not tried again for `retryDelayMs(failures)` (growing
 * with each failure in a row), `last_error` saying why. Only while the row is still the one read
 * and still due: a firer that fired the tick meanwhile, or another that already pushed it back,
 * wins, so racing firers count one failure. Returns when it is tried again (null: not pushed back).
 */
async function pushBack(db: Db, s: DueRow, err: unknown, log?: FireLog): Promise<Date | null> {
  const failures = Number(s.failures ?? 0) + 1;
  const delayMs = retryDelayMs(failures);
  const lastError = err instanceof ScheduleClockError ? err.message : FIRE_FAILED;
  // The loggers write an `error` field through loggableError (no SQL parameters in the log).
  log?.warn("schedule tick not fired; tried again after a delay", {
    schedule_id: s.id,
    tenant_id: s.tenantId,
    failures,
    retry_in_ms: delayMs,
    error: err,
  });
  try {
    const rows = resultRows<{ retry_at: string | Date }>(
      await db.execute(sql`
        UPDATE schedules SET retry_at = now() + ${delayMs}::int * interval '1 millisecond',
          failures = failures + 1, last_error = ${lastError}
        WHERE id = ${s.id}::uuid AND enabled AND next_run_at = ${s.next_iso}::timestamptz
          AND greatest(next_run_at, retry_at) <= now()
        RETURNING retry_at`),
    );
    return rows[0] ? new Date(rows[0].retry_at) : null;
  } catch (pushErr) {
    // Postgres itself failing: the row stays due and the next pass tries it (and this) again.
    log?.warn("schedule retry delay not recorded", { schedule_id: s.id, error: pushErr });
    return null;
  }
}

/**
 * One schedule's tick. Its job is admitted at fire time, as a submit is (allow-lists and budgets
 * change after the schedule was made): a refusal moves the schedule to its next tick like a
 * skipped one, with no job (so no webhook delivery either) and `last_run_at` unchanged; it is not
 * a failure to fire (nothing is retried: the next tick is admitted afresh). Its message is the
 * schedule's `last_error` until a tick fires, and it is logged and returned with its reason. The budget and queue checks are also in the INSERT, so a
 * budget spent between the check and the statement still makes no job.
 */
async function fireOne(
  db: Db,
  s: DueRow,
  now: Date,
  rules: AdmissionRules,
  log?: FireLog,
): Promise<{ fired: FiredTick | null; next: Date | null }> {
  const dueAt = new Date(s.nextRunAt as Date);
  let { fire, next } = tickToFire({ cron: s.cron, timezone: s.timezone, catchUp: s.catchUp as CatchUp }, dueAt, now);
  const agent = fire && s.agent ? await resolveRunnableAgent(db, s.tenantId, s.agent) : null;
  if (fire && s.agent && !agent) {
    log?.warn("schedule tick skipped: its agent is gone or archived", { schedule_id: s.id, agent: s.agent });
    fire = null;
  }
  const plan = { model: agent?.models ?? null, tools: agent?.tools ?? [] };
  const refused = fire
    ? await admitJob(db, rules, s.tenantId, plan, agent ? `agent: ${agent.name}@${agent.version}'s ` : "")
    : null;
  if (refused) fire = null;
  const jobId = crypto.randomUUID();
  const timeoutMs = agent?.timeoutMs ?? (jobs.timeoutMs.default as number);
  const rows = resultRows<{ job_id: string | null }>(
    await db.execute(sql`
      WITH s AS (
        UPDATE schedules SET next_run_at = ${next?.toISOString() ?? null}::timestamptz,
          last_run_at = coalesce(${fire?.toISOString() ?? null}::timestamptz, last_run_at),
          retry_at = NULL, failures = 0, last_error = ${refused?.message ?? null}
        WHERE id = ${s.id}::uuid AND enabled AND next_run_at = ${s.next_iso}::timestamptz
        RETURNING id, tenant_id, input, metadata
      ), j AS (
        INSERT INTO jobs (id, tenant_id, input, model, tools, metadata, agent_name, agent_version, timeout_ms,
          priority, schedule_id, scheduled_for)
        SELECT ${jobId}::uuid, s.tenant_id, s.input, ${agent?.model ?? null}, ${JSON.stringify(agent?.tools ?? [])}::jsonb,
          s.metadata, ${agent?.name ?? null}, ${agent?.version ?? null}::int, ${timeoutMs}::int,
          ${agent?.priority ?? 0}::int, s.id, ${fire?.toISOString() ?? null}::timestamptz
        FROM s WHERE ${fire?.toISOString() ?? null}::timestamptz IS NOT NULL
          AND ${queueFitsSql(sql`s.tenant_id`, rules.maxQueued)} AND NOT ${overBudgetSql(sql`s.tenant_id`)}
        ON CONFLICT DO NOTHING
        RETURNING id
      )
      SELECT (SELECT id FROM j) AS job_id FROM s`),
  );
  const row = rows[0];
  if (!row) return { fired: null, next };
  // Logged by the firer that moved the schedule on, not by every firer that raced for the tick.
  if (refused) {
    log?.warn("schedule tick skipped: job admission refused it", {
      schedule_id: s.id,
      reason: refused.reason,
      message: refused.message,
    });
  }
  return {
    fired: { scheduleId: s.id, scheduledFor: row.job_id ? fire : null, jobId: row.job_id, next, refused },
    next,
  };
}

/**
 * The agent version `ref` names, as a job made without a request runs it (a schedule's tick, an
 * eval's judge): null when it is gone or archived.
 */
export async function resolveRunnableAgent(db: Db, tenantId: string, ref: string) {
  const parsed = parseAgentRef(ref);
  if (!parsed) return null;
  const found = await getAgentVersion(db, tenantId, parsed.name, parsed.version);
  if (!found || found.archived) return null;
  return {
    name: found.view.name,
    version: found.view.version,
    model: agentModels(found.definition)[0] as string,
    /** The primary and its fallbacks, each checked at the tick like a submit's. */
    models: agentModels(found.definition),
    tools: toolNames(found.definition.tools),
    timeoutMs: found.definition.limits.timeout_s === null ? null : found.definition.limits.timeout_s * 1000,
    // A tick's job takes its agent's default priority (a schedule has no priority of its own).
    priority: agentPriority(found.definition),
  };
}
