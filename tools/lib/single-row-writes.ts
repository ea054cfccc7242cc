/**
 * One-row forms of the host's owner writes, for tests, benches and chaos drills that drive a job's
 * lifecycle by hand. The hosts never write one row at a time: they claim with `claimFromPostgres`
 * and group-commit the started CAS and the terminal write (`markStartedMany`, `finishJobsMany`,
 * src/db/ownership-repo.ts). These keep the same fences, since each is that batch statement with a
 * batch of one, or (the claim by id) the same claimable CAS; they live here so the product carries
 * no function without a production caller.
 */
import { sql } from "drizzle-orm";
import type { Db } from "../../src/db/client";
import { resultRows } from "../../src/db/client";
import {
  claimable,
  type ExecutionIdentity,
  type FinalOutcome,
  type FinishResult,
  finishJobsMany,
  markStartedMany,
  type PendingFacts,
} from "../../src/db/ownership-repo";

/** Claim one job by id, as a racing claimer would. Only a one-row hit counts; returns the new epoch. */
export async function claimJob(db: Db, jobId: string, host: string, token: string): Promise<number | null> {
  const won = await claimJobs(db, host, [{ jobId, token }]);
  return won.get(jobId) ?? null;
}

/**
 * Claim several jobs by id in one statement. Each row is the claim's CAS, checked per row: a job
 * another host took, or that is no longer queued, is simply not in the result. Returns the new
 * epoch of every job won, by job id. Named like a lifecycle statement (`ear_claim_ready`), so a
 * host's prepared-statement naming and the chaos proxy's claim faults treat it as a claim.
 */
export async function claimJobs(
  db: Db,
  host: string,
  candidates: Array<{ jobId: string; token: string }>,
): Promise<Map<string, number>> {
  if (candidates.length === 0) return new Map();
  const rows = resultRows<{ id: string; epoch: number }>(
    await db.execute(sql`/* ear_claim_ready */
      UPDATE jobs SET owner = ${host}, claimed_at = now(), epoch = jobs.epoch + 1, token = mine.token
      FROM unnest(
        string_to_array(${candidates.map((c) => c.jobId).join(",")}, ',')::uuid[],
        string_to_array(${candidates.map((c) => c.token).join(",")}, ',')::uuid[]
      ) AS mine(job_id, token)
      WHERE jobs.id = mine.job_id AND ${claimable("jobs")}
      RETURNING jobs.id, jobs.epoch`),
  );
  return new Map(rows.map((r) => [r.id, Number(r.epoch)]));
}

/** The started CAS for one claim (the host's batch of one). */
export async function markStarted(db: Db, id: ExecutionIdentity): Promise<boolean> {
  return (await markStartedMany(db, [id])).has(id.executionId);
}

/** The terminal write for one execution, checked by its identity. */
export async function finishJob(db: Db, id: ExecutionIdentity, outcome: FinalOutcome): Promise<boolean> {
  return (await finishJobReporting(db, id, outcome)).written;
}

/** The terminal write for one execution, with what it learned (cancel lag, timing facts). */
export async function finishJobReporting(
  db: Db,
  id: ExecutionIdentity,
  outcome: FinalOutcome,
  facts?: PendingFacts,
): Promise<FinishResult> {
  const [r] = await finishJobsMany(db, [{ id, outcome, facts }]);
  return r as FinishResult;
}
