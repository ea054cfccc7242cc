/**
 * Cancel a job: the durable request in Postgres first
 * (`requestCancel`), then — only when an owner must stop a claimed or running job — the Redis
 * hint its host polls every ~200 ms. The hint is an accelerator: if Redis is down the host still
 * sees `cancel_requested_at` on its ~1 s Postgres check, so a failed SET is logged, not raised.
 */
import { type CancelStatus, requestCancel } from "../../src/db/control-repo";
import { redisKeys } from "../../src/quota/keys";
import { callDependency, type Deps } from "../deps";
import { accelerate } from "./redis-accelerator";

/** Outlives any host's check interval by far; the key only has to be seen once. */
export const CANCEL_HINT_TTL_S = 600;
const keys = redisKeys();

/**
 * `defer`, when given, takes the hint's SET instead of it being awaited (the route passes
 * `waitUntil`): the answer only has to wait for what makes the cancel true, the durable request.
 */
export async function cancelJob(
  deps: Deps,
  tenantId: string,
  jobId: string,
  defer?: (work: Promise<unknown>) => void,
): Promise<CancelStatus> {
  const db = deps.db();
  const status = await callDependency("postgres", () => requestCancel(db, tenantId, jobId));
  if (status === "requested") {
    await accelerate(
      deps,
      (redis) => redis.set(keys.cancelHint(jobId), String(Date.now()), { ex: CANCEL_HINT_TTL_S }),
      { msg: "cancel hint SET failed; the host will see Postgres", fields: { jobId } },
      defer,
    );
  }
  return status;
}
