/**
 * Putting jobs into the ready index (keys.readyIndex()), scored by when they become runnable
 * (created, or a later `run_at`): claimers read only entries whose score has passed, so a delayed
 * job's wake-up is its entry coming due, not a poll of the job. The claim itself chooses which
 * runnable jobs to take, fairly (src/db/ownership-repo.ts claimFromPostgres). This is what a host's reaper and the Worker's cron backstop do with the
 * jobs a recovery pass re-queued (src/db/recovery-pass.ts), and what a host's index rebuild does
 * with every claimable job. Only an accelerator: the jobs are already claimable in Postgres.
 */
import type { Redis } from "./redis";

export async function indexReady(
  redis: Redis,
  readyIndexKey: string,
  jobs: ReadonlyArray<{ id: string; createdAt: Date; runAt?: Date | null }>,
): Promise<void> {
  const [first, ...rest] = jobs.map((j) => ({ score: readyScore(j), member: j.id }));
  if (first) await redis.zadd(readyIndexKey, first, ...rest);
}

/** A job's ready-index score: the instant it becomes runnable, in ms. */
export function readyScore(j: { createdAt: Date; runAt?: Date | null }): number {
  return Math.max(j.createdAt.getTime(), j.runAt?.getTime() ?? 0);
}
