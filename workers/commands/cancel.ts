/**
 * Cancel a job: the durable request in Postgres first
 * (`requestCancel`), then — only when an owner must stop a claimed or running job — the Redis
 * hint its host polls every ~200 ms. The hint is an accelerator: if Redis is down the host still
 * sees `cancel_requested_at` on its ~1 s Postgres check, so a failed SET is logged, not raised.
 */
import { type CancelStatus, requestCancel } from "../../src/db/control-repo";
import { redisKeys } from "../../src/quota/keys";
import { callDependency, type Deps, withTimeout } from "../deps";
import { log } from "../log";

/** Outlives any host's check interval by far; the key only has to be seen once. */
export const CANCEL_HINT_TTL_S = 600;
const HINT_TIMEOUT_MS = 500;
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
    const hint = setCancelHint(deps, jobId);
    if (defer) defer(hint);
    else await hint;
  }
  return status;
}

async function setCancelHint(deps: Deps, jobId: string): Promise<void> {
  try {
    await withTimeout(
      deps.redis().set(keys.cancelHint(jobId), String(Date.now()), { ex: CANCEL_HINT_TTL_S }),
      HINT_TIMEOUT_MS,
      "redis",
    );
  } catch (err) {
    log.warn("cancel hint SET failed; the host will see Postgres", { jobId, error: err });
  }
}
