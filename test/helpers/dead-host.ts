/**
 * What a sandbox-host that has since died leaves in Postgres, for the tests of recovery (the
 * recovery pass, the cron backstop): a claim, started or not, and a run suspended on an approval
 * with a deadline. Recovery must end these with no help from their host.
 */
import { randomUUID } from "node:crypto";
import { expect } from "vitest";
import type { Db } from "../../src/db/client";
import { suspendJob } from "../../src/db/wait-repo";
import type { ExecutionIdentity } from "../../src/domain/identity";
import { claimJob, markStarted } from "../../tools/lib/single-row-writes";

export const DEAD_HOST = "dead-host";

/** Claims the job as the dead host and, unless `start` is false, starts its execution. */
export async function claimAsDeadHost(db: Db, jobId: string, start = true): Promise<ExecutionIdentity> {
  const token = randomUUID();
  const epoch = await claimJob(db, jobId, DEAD_HOST, token);
  expect(epoch).not.toBeNull();
  const id = { jobId, host: DEAD_HOST, epoch: epoch as number, token, executionId: randomUUID() };
  if (start) expect(await markStarted(db, id)).toBe(true);
  return id;
}

/** Starts the job as the dead host and suspends it on an approval that ends after `deadlineS`. */
export async function waitAsDeadHost(
  db: Db,
  jobId: string,
  onDeadline: "deny" | "fail",
  deadlineS: number,
): Promise<void> {
  const execution = await claimAsDeadHost(db, jobId);
  const suspended = await suspendJob(db, execution, {
    kind: "approval",
    callId: `call-${jobId}`,
    tool: "shell",
    arguments: {},
    question: null,
    deadlineS,
    onDeadline,
    checkpoint: { v: 1 },
  });
  expect(suspended.suspended).toBe(true);
}
