/**
 * A message becomes a job (through the backend: the same `submitJob` as POST /v1/jobs), and
 * everyone connected follows it from its first event. A repeated client_message_id is the same
 * job again, sent back to the socket that repeated it only. A job that started running becomes
 * the conversation's active job, the one the busy policy (busy-policy.ts) applies to.
 */
import type { ServerFrame } from "../../../src/contracts/chat";
import { isFinalState } from "../../../src/contracts/job-state";
import { chatRequestHash } from "./chat-backend";
import { deliver } from "./event-delivery";
import type { Session } from "./session";
import type { Identity, QueuedMessage } from "./session-store";
import { send, socketState } from "./sockets";
import { watch } from "./watchdog";

export async function submit(s: Session, identity: Identity, frame: QueuedMessage, origin?: WebSocket): Promise<void> {
  const { job, created } = await s.backend().submit({
    tenantId: identity.tenantId,
    conversationId: identity.conversationId,
    content: frame.content,
    clientMessageId: frame.client_message_id,
    ...(frame.agent ? { agent: frame.agent } : {}),
    ...(frame.traceparent ? { traceparent: frame.traceparent } : {}),
  });
  const sent = await s.store.sentMessages();
  const recorded = sent[frame.client_message_id];
  if (recorded === undefined || typeof recorded === "string" || recorded.job !== job.id) {
    sent[frame.client_message_id] = { job: job.id, hash: await chatRequestHash(frame.content, frame.agent) };
    await s.store.saveSentMessages(sent);
  }
  const jobs = await s.store.jobs();
  const known = jobs[job.id] !== undefined;
  const finished = isFinalState(job.state);
  if (!known) {
    jobs[job.id] = { relayed: 0, finished: false };
    await s.store.saveJobs(jobs);
  }
  const jobFrame: ServerFrame = { type: "job", job, client_message_id: frame.client_message_id };
  if (created || !known) {
    for (const ws of s.ctx.getWebSockets()) {
      const state = socketState(ws);
      if (state.cursors[job.id] === undefined && !jobs[job.id]?.finished) state.cursors[job.id] = 0;
      ws.serializeAttachment(state);
      send(ws, jobFrame);
    }
  } else if (origin) {
    send(origin, jobFrame); // a repeated client_message_id: the same job, not a new one
  }
  if (!finished && created) await s.store.setActiveJob(job.id);
  if (!jobs[job.id]?.finished) {
    await watch(s, identity, job.id);
    await deliver(s, job.id);
  }
}
