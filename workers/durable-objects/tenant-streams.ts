/**
 * TenantStreamsObject — one Durable Object per tenant (`idFromName(tenant_id)`) counting the
 * tenant's open streams: SSE subscriptions (held by each job's JobEvents object) and chat
 * WebSockets (held by each conversation's ChatSession). Those live in many objects, so none of
 * them can count the tenant's total; this one does, as leases.
 *
 * A lease is {stream id → expires_at} in the object's SQLite. The holder renews its leases while
 * the stream is open and releases them when it closes. A holder that dies without a clean close
 * (object evicted, isolate crash) stops renewing, and its leases stop counting at expiry, so a
 * slot is never lost for longer than STREAM_LEASE.ttlMs. The count is exact otherwise: every
 * acquire runs in this single-threaded object, the cap checked and the lease written in one turn.
 */

import { DurableObject } from "cloudflare:workers";
import { ApiError } from "../../src/contracts/errors";
import type { Env } from "../env";
import { log } from "../log";
import { apiErrorResponse } from "../middleware/errors/errors";
import type { AcquireResult, StreamKind, TenantStreamsRpc } from "./rpc";

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

export class TenantStreamsObject extends DurableObject<Env> implements TenantStreamsRpc {
  constructor(ctx: DurableObjectState, env: Env) {
    super(ctx, env);
    ctx.storage.sql.exec(
      "CREATE TABLE IF NOT EXISTS leases (id TEXT PRIMARY KEY, kind TEXT NOT NULL, expires_at INTEGER NOT NULL)",
    );
  }

  /** Take a slot for stream `id` unless `cap` unexpired leases are held already (cap 0 = no cap). */
  async acquire(id: string, kind: StreamKind, cap: number, ttlMs: number = STREAM_LEASE.ttlMs): Promise<AcquireResult> {
    const now = Date.now();
    const sql = this.ctx.storage.sql;
    sql.exec("DELETE FROM leases WHERE expires_at <= ?", now);
    if (cap > 0) {
      const open = sql.exec<{ n: number }>("SELECT count(*) AS n FROM leases WHERE id <> ?", id).one().n;
      if (open >= cap) return { ok: false, open };
    }
    sql.exec(
      "INSERT INTO leases (id, kind, expires_at) VALUES (?, ?, ?) ON CONFLICT (id) DO UPDATE SET expires_at = excluded.expires_at",
      id,
      kind,
      now + ttlMs,
    );
    return { ok: true };
  }

  /**
   * Extend the leases of streams that are still open. A lease that expired or was released is
   * not written again: a renewal can race the release of a stream that just closed, and bringing
   * that lease back would hold a slot for nothing. The price, if renewals fail for a whole TTL,
   * is an open stream that no longer counts (the cap is briefly lenient, never stuck).
   */
  async renew(ids: string[], ttlMs: number = STREAM_LEASE.ttlMs): Promise<void> {
    const now = Date.now();
    for (const id of ids) {
      this.ctx.storage.sql.exec(
        "UPDATE leases SET expires_at = ? WHERE id = ? AND expires_at > ?",
        now + ttlMs,
        id,
        now,
      );
    }
  }

  async release(ids: string[]): Promise<void> {
    for (const id of ids) this.ctx.storage.sql.exec("DELETE FROM leases WHERE id = ?", id);
  }

  /** Unexpired leases by kind (tests, docs/limits.md figures). */
  async count(): Promise<Record<StreamKind, number>> {
    const rows = this.ctx.storage.sql
      .exec<{ kind: StreamKind; n: number }>(
        "SELECT kind, count(*) AS n FROM leases WHERE expires_at > ? GROUP BY kind",
        Date.now(),
      )
      .toArray();
    const out: Record<StreamKind, number> = { sse: 0, ws: 0 };
    for (const r of rows) out[r.kind] = r.n;
    return out;
  }
}

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
