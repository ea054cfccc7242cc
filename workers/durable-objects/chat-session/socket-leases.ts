/**
 * The sockets' tenant stream leases (tenant-streams/stream-leases.ts). A socket past the tenant's
 * cap is refused before the upgrade (upgrade.ts); one that was counted holds its lease in its
 * attachment. A hibernated object has no timer, so the alarm is what renews: it is kept due
 * within STREAM_LEASE.socketRenewMs while any counted socket is open. A close releases at once.
 */
import { STREAM_LEASE, settleLeases } from "../tenant-streams/stream-leases";
import type { Session } from "./session";
import { socketState } from "./sockets";

export async function renewLeases(s: Session): Promise<void> {
  const leases = s.ctx.getWebSockets().flatMap((ws) => socketState(ws).lease ?? []);
  const identity = await s.store.identity();
  if (identity && leases.length > 0) await settleLeases(s.env, identity.tenantId, "renew", leases);
  await armLeaseRenewal(s);
}

export async function releaseLease(s: Session, ws: WebSocket): Promise<void> {
  const state = socketState(ws);
  if (!state.lease) return;
  const lease = state.lease;
  delete state.lease;
  try {
    ws.serializeAttachment(state);
  } catch {}
  const identity = await s.store.identity();
  if (identity) await settleLeases(s.env, identity.tenantId, "release", [lease]);
}

/** Keep an alarm due within the renewal period while any socket holds a lease. */
export async function armLeaseRenewal(s: Session): Promise<void> {
  if (!s.ctx.getWebSockets().some((ws) => socketState(ws).lease)) return;
  const due = Date.now() + STREAM_LEASE.socketRenewMs;
  const current = await s.ctx.storage.getAlarm();
  if (current === null || current < Date.now() || current > due) await s.ctx.storage.setAlarm(due);
}
