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
 * The holders' side (taking a slot, renewing, releasing) is stream-leases.ts.
 */

import { DurableObject } from "cloudflare:workers";
import type { Env } from "../../env";
import type { AcquireManyResult, AcquireResult, StreamKind, TenantStreamsRpc } from "../rpc";
import { STREAM_LEASE } from "./stream-leases";

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
   * `acquire` for several streams in one call and one turn (the gateway joins the stream opens of
   * a tenant that arrive while a call is in flight: stream-leases.ts, `acquireStreamSlotJoined`).
   * Ids are taken in order while the count is under `cap`; the rest are refused. An id that
   * already holds a lease keeps it (renewed), as `acquire` does, so a retried call counts nothing twice.
   */
  async acquireMany(
    ids: string[],
    kind: StreamKind,
    cap: number,
    ttlMs: number = STREAM_LEASE.ttlMs,
  ): Promise<AcquireManyResult> {
    const now = Date.now();
    const sql = this.ctx.storage.sql;
    sql.exec("DELETE FROM leases WHERE expires_at <= ?", now);
    let open = sql.exec<{ n: number }>("SELECT count(*) AS n FROM leases").one().n;
    const granted: string[] = [];
    for (const id of ids) {
      const held = sql.exec("SELECT 1 FROM leases WHERE id = ?", id).toArray().length > 0;
      if (!held) {
        if (cap > 0 && open >= cap) continue;
        open++;
      }
      sql.exec(
        "INSERT INTO leases (id, kind, expires_at) VALUES (?, ?, ?) ON CONFLICT (id) DO UPDATE SET expires_at = excluded.expires_at",
        id,
        kind,
        now + ttlMs,
      );
      granted.push(id);
    }
    return { granted, open };
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
