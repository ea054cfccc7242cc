/**
 * Following a job, and the watchdog that covers lost pushes. A session registers with the job's
 * object (`watch`), which then pushes each append; a push can still be lost (the session evicted
 * mid-call, a failed RPC), so while any relayed job is unfinished an alarm re-registers and pulls
 * every such job at least every CHAT_WATCHDOG_MS. The same alarm renews stream leases
 * (socket-leases.ts): one alarm per object, whichever is due sooner.
 */

import { deliver, jobEvents } from "./event-delivery";
import type { Session } from "./session";
import { chatSessionName } from "./session-address";
import type { Identity } from "./session-store";

/** While a relayed job is unfinished, pull from its log at least this often (lost pushes, eviction). */
export const CHAT_WATCHDOG_MS = 5_000;

export async function watch(s: Session, identity: Identity, jobId: string): Promise<void> {
  await jobEvents(s.env, jobId).watch(jobId, chatSessionName(identity.tenantId, identity.conversationId));
  await armWatchdog(s);
}

/** The alarm's relay half: re-register with and pull every unfinished job, then re-arm. */
export async function watchdogPass(s: Session): Promise<void> {
  const identity = await s.store.identity();
  const jobs = await s.store.jobs();
  for (const [jobId, j] of Object.entries(jobs)) {
    if (j.finished) continue;
    if (identity)
      await jobEvents(s.env, jobId).watch(jobId, chatSessionName(identity.tenantId, identity.conversationId));
    await deliver(s, jobId);
  }
  await armWatchdog(s);
}

async function armWatchdog(s: Session): Promise<void> {
  const unfinished = Object.values(await s.store.jobs()).some((j) => !j.finished);
  if (!unfinished) return;
  const due = Date.now() + CHAT_WATCHDOG_MS;
  const current = await s.ctx.storage.getAlarm();
  if (current === null || current < Date.now()) await s.ctx.storage.setAlarm(due);
}
