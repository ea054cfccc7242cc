/**
 * Cancel a job: the durable request in Postgres first
 * (`requestCancel`), then — only when an owner must stop a claimed or running job — the Redis
 * hint its host polls every ~200 ms. The hint is an accelerator: if Redis is down the host still
 * sees `cancel_requested_at` on its ~1 s Postgres check, so a failed SET is logged, not raised.
 */
import { type CancelStatus, requestTreeCancel } from "../../src/db/control-repo";
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
  // The whole subtree is cancelled durably in that one statement; every running descendant's
  // owner (and the job's) gets a hint, in one round trip.
  const { status, requested } = await callDependency("postgres", () => requestTreeCancel(db, tenantId, jobId));
  if (requested.length > 0) {
    const now = String(Date.now());
    await accelerate(
      deps,
      (redis) => {
        const p = redis.pipeline();
        for (const id of requested) p.set(keys.cancelHint(id), now, { ex: CANCEL_HINT_TTL_S });
        return p.exec();
      },
      { msg: "cancel hint SET failed; the host will see Postgres", fields: { jobId, hints: requested.length } },
      defer,
    );
  }
  return status;
}
