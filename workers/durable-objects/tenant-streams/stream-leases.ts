/**
 * The holders' side of the tenant's stream count (TenantStreamsObject, tenant-streams-object.ts):
 * the lease timings, taking a slot for a new stream and settling leases, as the JobEvents object
 * (SSE subscribers) and the ChatSession object (WebSockets) call them. Holders reach the counter
 * only through `tenantStreams`, over RPC, so they never import the object's class.
 */
import { ApiError } from "../../../src/contracts/errors";
import type { Env } from "../../env";
import { log } from "../../log";
import { apiErrorResponse } from "../../middleware/error-handler/error-handler";
import type { AcquireResult, StreamKind } from "../rpc";

export const STREAM_LEASE = {
  /** A lease not renewed for this long stops counting. */
  ttlMs: 60_000,
  /**
   * A WebSocket holder (which may hibernate, so has no timer of its own) renews this often by
   * alarm; SSE holders renew at each keepalive (10 s). Three renewals fit in one TTL, so one late
   * or failed renewal does not free a slot that is in use.
   */
  socketRenewMs: 20_000,
  /** Retry-After for a refused stream: open streams are renewed, so no expiry date is meaningful. */
  retryAfterS: 5,
} as const;

/** The tenant's counter object; callers name it only through this. */
export function tenantStreams(env: Env, tenantId: string) {
  return env.TENANT_STREAMS.get(env.TENANT_STREAMS.idFromName(tenantId));
}

/**
 * Best-effort renew/release from a holder: a failure is logged and the lease expires on its own,
 * which is the fallback this design relies on anyway.
 */
export function settleLeases(env: Env, tenantId: string, op: "renew" | "release", ids: string[]): Promise<void> {
  if (ids.length === 0) return Promise.resolve();
  const stub = tenantStreams(env, tenantId);
  const call = op === "renew" ? stub.renew(ids) : stub.release(ids);
  return call.catch((err: unknown) => {
    log.warn(`stream lease ${op} failed; leases expire on their own`, { tenantId, error: err });
  });
}

/**
 * A slot for a new stream of `tenantId`: the lease id to hold while the stream is open, or the
 * 429 `rate_limited` answer to send instead of opening it. cap 0 = not limited (no lease taken).
 * The counter object being unreachable fails open with a log: refusing every stream because the
 * counter is down would turn a limit into an outage.
 */
export async function acquireStreamSlot(
  env: Env,
  tenantId: string,
  kind: StreamKind,
  cap: number,
): Promise<string | Response | null> {
  if (!(cap > 0)) return null;
  const id = `${kind}:${crypto.randomUUID()}`;
  let result: AcquireResult;
  try {
    result = await tenantStreams(env, tenantId).acquire(id, kind, cap);
  } catch (err) {
    log.warn("stream counter unavailable; stream opened uncounted", { tenantId, error: err });
    return null;
  }
  if (result.ok) return id;
  return apiErrorResponse(
    new ApiError(
      "rate_limited",
      `this tenant already has ${result.open} open streams (limit ${cap}); close one or retry later`,
      { retryAfterS: STREAM_LEASE.retryAfterS },
    ),
  );
}
