/**
 * The holders' side of the tenant's stream count (TenantStreamsObject, tenant-streams-object.ts):
 * the lease timings, taking a slot for a new stream and settling leases, as the JobEvents object
 * (SSE subscribers) and the ChatSession object (WebSockets) call them. Holders reach the counter
 * only through `tenantStreams`, over RPC, so they never import the object's class.
 */
import { ApiError } from "../../../src/contracts/errors";
import { settlesWithin } from "../../../src/domain/async";
import type { Env } from "../../env";
import { log } from "../../log";
import { apiErrorResponse } from "../../middleware/error-handler/error-handler";
import type { AcquireManyResult, AcquireResult, StreamKind } from "../rpc";

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
  return acquireStreamSlotAs(env, tenantId, kind, cap, `${kind}:${crypto.randomUUID()}`);
}

/** The most stream opens one `acquireMany` call carries. */
export const JOINED_ACQUIRE_MAX = 256;
/**
 * How long an open waits for a call another request started before asking on its own (with the
 * same lease id, so nothing is counted twice): the runtime may cancel a request's outbound I/O
 * when its client goes away, and a call left pending by it must not hold up the others.
 */
export const JOINED_ACQUIRE_WAIT_MS = 2_000;

type SlotVerdict = { ok: true } | { ok: false; open: number } | { ok: null };

/**
 * One open waiting for a slot. It waits on a promise it made itself (`wake`), which the request
 * whose call decides it resolves: a request never awaits a promise another request made. workerd
 * cancels the continuations of a request that awaits another request's promise once that
 * request has ended, and answers it 500 "your Worker's code had hung": 5 of 100 stream opens at
 * step 100 on `npm run dev` did, while they awaited the call in flight directly.
 */
interface Waiter {
  id: string;
  verdict?: SlotVerdict;
  wake: () => void;
}

interface SlotQueue {
  waiting: Waiter[];
  /**
   * When the call in flight for this tenant and cap began (0: none); its request wakes the
   * waiters after it. A call older than JOINED_ACQUIRE_WAIT_MS is taken for one whose request
   * was cancelled before it could say so, and the next open asks.
   */
  askingSince: number;
}

/** (tenant, kind, cap) → the opens waiting for a slot in this isolate. */
const slotQueues = new Map<string, SlotQueue>();

function refusal(open: number, cap: number): Response {
  return apiErrorResponse(
    new ApiError(
      "rate_limited",
      `this tenant already has ${open} open streams (limit ${cap}); close one or retry later`,
      {
        retryAfterS: STREAM_LEASE.retryAfterS,
      },
    ),
  );
}

/**
 * `acquireStreamSlot`, joined with the other opens of the same tenant in this isolate: while one
 * call to the tenant's counter is in flight, the opens that arrive wait, and the next call
 * (`acquireMany`) takes a slot for all of them at once, in arrival order. A burst of N opens
 * costs a few calls instead of N, and the count stays exact: every slot is still granted by the
 * counter, in one turn, against the cap. Each open keeps its own lease (renewed and released by
 * its holder as before). The call is made by a request that is waiting itself, so it is that
 * request's own I/O; when it ends, the requests still waiting are woken and the next of them asks.
 * `keepAlive` keeps the call alive past its request (the route's waitUntil).
 */
export async function acquireStreamSlotJoined(
  env: Env,
  tenantId: string,
  kind: StreamKind,
  cap: number,
  keepAlive: (work: Promise<unknown>) => void,
): Promise<string | Response | null> {
  if (!(cap > 0)) return null;
  const key = `${tenantId}\n${kind}\n${cap}`;
  let queue = slotQueues.get(key);
  if (!queue) {
    queue = { waiting: [], askingSince: 0 };
    slotQueues.set(key, queue);
  }
  const deadline = Date.now() + JOINED_ACQUIRE_WAIT_MS;
  let woken!: Promise<void>;
  const me: Waiter = { id: `${kind}:${crypto.randomUUID()}`, wake: () => {} };
  const arm = () => {
    woken = new Promise<void>((resolve) => {
      me.wake = resolve;
    });
  };
  arm();
  queue.waiting.push(me);
  while (me.verdict === undefined) {
    if (queue.askingSince === 0 || Date.now() - queue.askingSince > JOINED_ACQUIRE_WAIT_MS) {
      // Nobody is asking: this request asks for everyone waiting (itself included).
      const batch = queue.waiting.splice(0, JOINED_ACQUIRE_MAX);
      const q = queue;
      const since = Date.now();
      q.askingSince = since;
      const call = askForSlots(env, tenantId, kind, cap, batch).finally(() => {
        if (q.askingSince === since) q.askingSince = 0;
        if (q.waiting.length === 0 && slotQueues.get(key) === q) slotQueues.delete(key);
        // The opens that arrived meanwhile: the first of them to run asks next.
        for (const w of q.waiting) w.wake();
      });
      keepAlive(call);
      await call;
      continue;
    }
    const left = deadline - Date.now();
    if (left <= 0) {
      const at = queue.waiting.indexOf(me);
      if (at >= 0) queue.waiting.splice(at, 1);
      return acquireStreamSlotAs(env, tenantId, kind, cap, me.id);
    }
    await settlesWithin(woken, left);
    arm();
  }
  const verdict = me.verdict;
  if (verdict.ok === null) {
    log.warn("stream counter unavailable; stream opened uncounted", { tenantId });
    return null;
  }
  return verdict.ok ? me.id : refusal(verdict.open, cap);
}

/** One `acquireMany` for `batch`; each waiter gets its verdict (ok null: the counter could not be asked) and is woken. */
async function askForSlots(env: Env, tenantId: string, kind: StreamKind, cap: number, batch: Waiter[]): Promise<void> {
  let result: AcquireManyResult;
  try {
    result = await tenantStreams(env, tenantId).acquireMany(
      batch.map((w) => w.id),
      kind,
      cap,
    );
  } catch (err) {
    log.warn("stream counter unavailable", { tenantId, error: err });
    for (const w of batch) {
      w.verdict = { ok: null };
      w.wake();
    }
    return;
  }
  const granted = new Set(result.granted);
  for (const w of batch) {
    w.verdict = granted.has(w.id) ? { ok: true } : { ok: false, open: result.open };
    w.wake();
  }
}

/** A single `acquire` with a given lease id (the joined path's fallback). */
async function acquireStreamSlotAs(
  env: Env,
  tenantId: string,
  kind: StreamKind,
  cap: number,
  id: string,
): Promise<string | Response | null> {
  let result: AcquireResult;
  try {
    result = await tenantStreams(env, tenantId).acquire(id, kind, cap);
  } catch (err) {
    log.warn("stream counter unavailable; stream opened uncounted", { tenantId, error: err });
    return null;
  }
  return result.ok ? id : refusal(result.open, cap);
}
