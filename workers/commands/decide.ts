/**
 * Deciding a waiting job's gated tool call (the REST route and a chat `decision` frame): the
 * durable decision and the re-queue in one statement (decideApproval, src/db/wait-repo.ts), then
 * the ready-index wake-up a submit also does (Postgres NOTIFYs hosts as well, drizzle/0008).
 * Idempotent: the same decision again answers what was recorded (200); a different one is 409.
 */
import { ApiError } from "../../src/contracts/errors";
import type { ApprovalAnswer, ApprovalBody } from "../../src/contracts/wait";
import { decideApproval, type RecordedDecision } from "../../src/db/wait-repo";
import { indexAndWake } from "../../src/quota/fleet-wake";
import { redisKeys } from "../../src/quota/keys";
import { callDependency, type Deps } from "../deps";
import { accelerate } from "./redis-accelerator";

const keys = redisKeys();

/**
 * The re-queued job goes back into the ready index, and sleeping hosts are poked, in one command
 * (src/quota/fleet-wake.ts; an accelerator: hosts also sweep Postgres).
 */
export function wakeHosts(deps: Deps, jobId: string, defer?: (work: Promise<unknown>) => void): Promise<void> {
  return accelerate(
    deps,
    (redis) => indexAndWake(redis, keys, [{ score: Date.now(), member: jobId.toLowerCase() }]),
    { msg: "ready index ZADD failed; hosts will find the resumed job in Postgres", fields: { jobId } },
    defer,
  );
}

function answerOf(d: RecordedDecision): ApprovalAnswer {
  return {
    call_id: d.callId,
    decision: d.decision === "approve" ? "approve" : "deny",
    note: d.note,
    decided_at: d.decidedAt.toISOString(),
    decided_by: d.decidedBy,
    add_usd: d.addUsd,
  };
}

/**
 * Returns the answer (`created`: this request recorded it), or null when the tenant has no such
 * job (the route tells 404 from a purged job's 410). Throws 404 for a call the job never waited on, 409 `conflict` for a different decision or a job that does
 * not wait on the call.
 */
export async function decide(
  deps: Deps,
  tenantId: string,
  jobId: string,
  callId: string,
  body: ApprovalBody,
  defer?: (work: Promise<unknown>) => void,
): Promise<{ body: ApprovalAnswer; created: boolean } | null> {
  const db = deps.db();
  const result = await callDependency("postgres", () =>
    decideApproval(db, tenantId, jobId, callId, body.decision, body.note ?? null, body.add_usd ?? null),
  );
  if (result.status === "not_found") return null;
  if (result.status === "unknown_call") throw new ApiError("not_found", `job ${jobId} never waited on call ${callId}`);
  if (result.status === "add_usd") {
    throw new ApiError(
      "invalid_request",
      result.kind === "budget"
        ? `add_usd: call ${callId} waits on the job's budget (budget.exhausted); approve it with add_usd, the US dollars to add to its limit`
        : `add_usd: call ${callId} is a tool call; add_usd only goes with a budget wait (budget.exhausted)`,
    );
  }
  // A delegate call waits for its child jobs: nobody decides it (its waitpoint row only records
  // when the children ended), so it is refused whether the children are still running or not.
  const kind = result.status === "not_waiting" ? result.kind : result.decision.kind;
  if (kind === "children") {
    throw new ApiError("conflict", `call ${callId} is a delegate call: it waits for its child jobs, not a decision`);
  }
  if (result.status === "not_waiting") {
    throw new ApiError(
      "conflict",
      result.kind === "input"
        ? `call ${callId} is a question (ask_user): answer it with POST /v1/jobs/${jobId}/input`
        : `the job is not waiting on call ${callId} (it was cancelled or ended)`,
    );
  }
  const answer = answerOf(result.decision);
  if (result.status === "existing") {
    if (result.decision.kind === "input") {
      throw new ApiError("conflict", `call ${callId} was a question (ask_user), answered by input`);
    }
    if (answer.decision !== body.decision || (body.add_usd !== undefined && answer.add_usd !== body.add_usd)) {
      throw new ApiError("conflict", `call ${callId} was already decided: ${answer.decision} (${answer.decided_by})`);
    }
    return { body: answer, created: false };
  }
  await wakeHosts(deps, jobId, defer);
  return { body: answer, created: true };
}
