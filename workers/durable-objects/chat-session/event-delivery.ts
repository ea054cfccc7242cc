/**
 * Relaying a job's events to the sockets that follow it. Each socket is sent only offsets above
 * its own cursor (kept in its attachment), so a push, a pull and a replay may overlap without a
 * duplicate or a gap. A push (`relay`) is used as it is when it starts right where the slowest
 * follower is; otherwise the job's log is read from there (`page`). The highest offset relayed
 * and whether the job finished are kept per job in the store, so after hibernation or eviction
 * the next push, frame or watchdog alarm carries on from them.
 */
import { isTerminalEventType } from "../../../src/contracts/events";
import type { Env } from "../../env";
import type { LoggedEvent } from "../job-events/event-log";
import { approvalRequestFrame } from "./frames";
import type { Session } from "./session";
import { sendRaw, socketState } from "./sockets";

/** Rows per pull from a job's log. */
const PAGE_SIZE = 500;

/** The job's JobEvents object, over RPC. */
export function jobEvents(env: Env, jobId: string) {
  return env.JOB_EVENTS.get(env.JOB_EVENTS.idFromName(jobId));
}

/**
 * Send every socket following `jobId` the events above its cursor. `pushed` is used when it
 * starts right where the slowest follower is; otherwise the log is read from there.
 */
export async function deliver(s: Session, jobId: string, pushed?: LoggedEvent[]): Promise<void> {
  const jobs = await s.store.jobs();
  const job = jobs[jobId];
  if (!job) return;
  const sockets = s.ctx.getWebSockets().map((ws) => ({ ws, state: socketState(ws), dirty: false }));
  const followers = sockets.filter((f) => f.state.cursors[jobId] !== undefined);
  const from = Math.min(
    job.finished ? Number.POSITIVE_INFINITY : job.relayed,
    ...followers.map((f) => f.state.cursors[jobId] as number),
  );
  if (!Number.isFinite(from)) return;

  let sawTerminal = false;
  let last = job.relayed;
  const emit = (events: Array<{ offset: number; type: string; body: string }>) => {
    for (const e of events) {
      const frame = `{"type":"event","offset":${e.offset},"event":${e.body}}`;
      const request = approvalRequestFrame(jobId, e);
      const terminal = isTerminalEventType(e.type);
      for (const f of followers) {
        const cursor = f.state.cursors[jobId];
        if (cursor === undefined || cursor >= e.offset) continue;
        sendRaw(f.ws, frame);
        if (request) sendRaw(f.ws, request);
        if (terminal) delete f.state.cursors[jobId];
        else f.state.cursors[jobId] = e.offset;
        f.dirty = true;
      }
      if (terminal) sawTerminal = true;
      last = Math.max(last, e.offset);
    }
  };

  const first = pushed?.[0];
  if (pushed && first && first.offset <= from + 1) {
    emit(pushed.filter((e) => e.offset > from));
  } else {
    for (let cursor = from; ; ) {
      const page = await jobEvents(s.env, jobId).page(cursor, PAGE_SIZE);
      emit(page.events);
      const tail = page.events[page.events.length - 1];
      if (!tail || page.events.length < PAGE_SIZE) break;
      cursor = tail.offset;
    }
  }
  for (const f of followers) if (f.dirty) f.ws.serializeAttachment(f.state);

  const fresh = await s.store.jobs();
  const current = fresh[jobId];
  if (!current) return;
  const newlyFinished = sawTerminal && !current.finished;
  current.relayed = Math.max(current.relayed, last);
  current.finished ||= sawTerminal;
  await s.store.saveJobs(fresh);
  if (newlyFinished) await s.jobFinished(jobId);
}
