/**
 * What a `message` frame does. A client_message_id already used is answered from what it became
 * (the same job, or its place in the queue), and refused if the content differs. Otherwise, with
 * no job running it becomes a job; while one runs, the socket's (or the frame's) multitask policy
 * decides: `reject` answers `conversation_busy`, `interrupt` cancels the running job and submits,
 * `queue` waits behind it (message-queue.ts).
 */
import type { ClientMessageFrame } from "../../../src/contracts/chat";
import { chatRequestHash } from "./chat-backend";
import { errorFrame, mismatchFrame } from "./frames";
import { submit } from "./job-submit";
import { enqueue } from "./message-queue";
import type { Session } from "./session";
import type { Identity, QueuedMessage } from "./session-store";
import { broadcast, send, socketState } from "./sockets";

export async function onMessage(
  s: Session,
  ws: WebSocket,
  identity: Identity,
  frame: ClientMessageFrame,
): Promise<void> {
  const policy = frame.multitask ?? socketState(ws).multitask;
  // The agent goes with the message from here on (into the queue, the job and its hash).
  const agent = frame.agent ?? socketState(ws).agent;
  const message: QueuedMessage = {
    content: frame.content,
    client_message_id: frame.client_message_id,
    ...(agent ? { agent } : {}),
    ...(frame.traceparent ? { traceparent: frame.traceparent } : {}),
  };
  // A client_message_id that already became a job: the same job again, whatever is running.
  // ...but only for the same content: another message under a used id is a client bug to report,
  // not the old job to pretend was its answer.
  const sent = await s.store.sentMessages();
  const sentJob = sent[frame.client_message_id];
  if (sentJob) {
    if (typeof sentJob !== "string" && sentJob.hash !== (await chatRequestHash(frame.content, agent))) {
      return send(ws, mismatchFrame(frame.client_message_id));
    }
    const job = await s.backend().findJob(identity.tenantId, typeof sentJob === "string" ? sentJob : sentJob.job);
    if (job) return send(ws, { type: "job", job, client_message_id: frame.client_message_id });
  }
  const queue = await s.store.queue();
  const alreadyQueued = queue.findIndex((q) => q.client_message_id === frame.client_message_id);
  if (alreadyQueued >= 0) {
    const queued = queue[alreadyQueued];
    if (queued?.content !== frame.content || queued.agent !== agent)
      return send(ws, mismatchFrame(frame.client_message_id));
    return send(ws, { type: "queued", client_message_id: frame.client_message_id, position: alreadyQueued + 1 });
  }
  const active = await s.store.activeJob();
  if (active === null) return submit(s, identity, message, ws);
  if (policy === "reject") {
    return send(ws, {
      ...errorFrame("conversation_busy", `job ${active} is still running in this conversation`),
      client_message_id: frame.client_message_id,
    });
  }
  if (policy === "interrupt") {
    const status = await s.backend().cancel(identity.tenantId, active);
    broadcast(s.ctx, { type: "cancel", job_id: active, status: status });
    return submit(s, identity, message, ws);
  }
  return enqueue(s, ws, queue, message);
}
