/**
 * Bulk replays (POST /v1/replays, docs/api.md "Steps, forks and reruns"): the jobs a filter
 * selects, the replay's row, and its progress read from the jobs it made (`jobs.replay_id`).
 * The reruns themselves are inserted by createJobs (jobs-repo.ts, `rerunOf`), as a batch.
 */
import { and, asc, desc, eq, gte, inArray, isNull, lt, sql } from "drizzle-orm";
import { parseAgentRef } from "../contracts/agent";
import type { CreateReplayBody } from "../contracts/fork";
import type { JobState } from "../contracts/job";
import { FINAL_STATES } from "../contracts/job-state";
import type { Db } from "./client";
import { type JobRow, jobs, replays } from "./schema";

/**
 * The tenant's jobs `filter` selects, newest first, at most `filter.limit`. Child jobs (made by a
 * delegate call) are left out: a parent's rerun makes its own children.
 */
export async function selectReplaySources(
  db: Db,
  tenantId: string,
  filter: CreateReplayBody["filter"],
): Promise<JobRow[]> {
  const conds = [eq(jobs.tenantId, tenantId), isNull(jobs.parentJobId)];
  const ref = filter.agent === undefined ? null : parseAgentRef(filter.agent);
  if (ref) {
    conds.push(eq(jobs.agentName, ref.name));
    if (ref.version !== null) conds.push(eq(jobs.agentVersion, ref.version));
  }
  if (filter.state) conds.push(eq(jobs.state, filter.state));
  if (filter.since) conds.push(gte(jobs.createdAt, new Date(filter.since)));
  if (filter.until) conds.push(lt(jobs.createdAt, new Date(filter.until)));
  return db
    .select()
    .from(jobs)
    .where(and(...conds))
    .orderBy(desc(jobs.createdAt), desc(jobs.id))
    .limit(filter.limit);
}

export async function insertReplay(
  db: Db,
  replay: { id: string; tenantId: string; filter: Record<string, unknown>; agent: string | null; jobsTotal: number },
): Promise<Date> {
  const [row] = await db.insert(replays).values(replay).returning({ createdAt: replays.createdAt });
  if (!row) throw new Error("replay insert returned no row");
  return row.createdAt;
}

export interface ReplayProgress {
  id: string;
  filter: Record<string, unknown>;
  agent: string | null;
  createdAt: Date;
  jobsTotal: number;
  jobs: Array<{ sourceJobId: string; jobId: string; state: JobState }>;
  progress: Partial<Record<JobState, number>>;
  finished: number;
}

/** The replay with its jobs in the order it made them; null when the tenant has no such replay. */
export async function getReplay(db: Db, tenantId: string, id: string): Promise<ReplayProgress | null> {
  const [row] = await db
    .select()
    .from(replays)
    .where(and(eq(replays.id, id), eq(replays.tenantId, tenantId)))
    .limit(1);
  if (!row) return null;
  const made = await db
    .select({ jobId: jobs.id, sourceJobId: jobs.forkedFromJobId, state: jobs.state })
    .from(jobs)
    .where(and(eq(jobs.replayId, id), eq(jobs.tenantId, tenantId)))
    .orderBy(asc(jobs.createdAt), sql`${jobs.id}`);
  const progress: Partial<Record<JobState, number>> = {};
  for (const j of made) progress[j.state as JobState] = (progress[j.state as JobState] ?? 0) + 1;
  return {
    id: row.id,
    filter: row.filter,
    agent: row.agent,
    createdAt: row.createdAt,
    jobsTotal: row.jobsTotal,
    jobs: made.map((j) => ({ jobId: j.jobId, sourceJobId: j.sourceJobId as string, state: j.state as JobState })),
    progress,
    finished: made.filter((j) => (FINAL_STATES as readonly string[]).includes(j.state)).length,
  };
}

/**
 * The jobs replay `replayId` reran (its sources), in the order it made their reruns; null when
 * the tenant has no such replay. A source purged since is left out.
 */
export async function selectReplayedSources(db: Db, tenantId: string, replayId: string): Promise<JobRow[] | null> {
  const [replay] = await db
    .select({ id: replays.id })
    .from(replays)
    .where(and(eq(replays.id, replayId), eq(replays.tenantId, tenantId)))
    .limit(1);
  if (!replay) return null;
  const made = await db
    .select({ sourceJobId: jobs.forkedFromJobId })
    .from(jobs)
    .where(and(eq(jobs.replayId, replayId), eq(jobs.tenantId, tenantId)))
    .orderBy(asc(jobs.createdAt), sql`${jobs.id}`);
  const ids = made.map((m) => m.sourceJobId).filter((id): id is string => id !== null);
  if (ids.length === 0) return [];
  const sources = await db
    .select()
    .from(jobs)
    .where(and(eq(jobs.tenantId, tenantId), inArray(jobs.id, ids)));
  const byId = new Map(sources.map((s) => [s.id, s]));
  return ids.map((id) => byId.get(id)).filter((s): s is JobRow => s !== undefined);
}
