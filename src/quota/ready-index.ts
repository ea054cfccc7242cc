/**
 * Putting jobs into the ready index (keys.readyIndex()), scored by when they were created so
 * claimers take the oldest first: what a host's reaper and the Worker's cron backstop do with the
 * jobs a recovery pass re-queued (src/db/recovery-pass.ts), and what a host's index rebuild does
 * with every claimable job. Only an accelerator: the jobs are already claimable in Postgres.
 */
import type { Redis } from "./redis";

export async function indexReady(
  redis: Redis,
  readyIndexKey: string,
  jobs: ReadonlyArray<{ id: string; createdAt: Date }>,
): Promise<void> {
  const [first, ...rest] = jobs.map((j) => ({ score: j.createdAt.getTime(), member: j.id }));
  if (first) await redis.zadd(readyIndexKey, first, ...rest);
}
