/**
 * One client frame, end to end: it counts against the socket's key rate (the invalid ones too, as
 * a request would), is parsed, and goes to its handler: `message` to the busy policy, `cancel`
 * and `decision` to the backend for a job of this conversation, `resume` to the delivery from the
 * client's cursor. Whatever fails is answered as an error frame on the same socket, with the
 * public code when there is one and `internal` (logged) otherwise.
 */
import { type ClientFrame, isChatErrorCode } from "../../../src/contracts/chat";
import { ApiError } from "../../../src/contracts/errors";
import type { JobView } from "../../../src/contracts/job";
import { log } from "../../log";
import { onMessage } from "./busy-policy";
import { deliver } from "./event-delivery";
import { errorFrame, parseFrame } from "./frames";
import type { Session } from "./session";
import type { Identity } from "./session-store";
import { send, socketState } from "./sockets";
import { watch } from "./watchdog";

export async function handleFrame(s: Session, ws: WebSocket, message: string | ArrayBuffer): Promise<void> {
  const parsed = parseFrame(message);
  const frame = "frame" in parsed ? parsed.frame : undefined;
  try {
    // Every frame counts against the socket's key, the invalid ones too, as a request would.
    const { keyHash } = socketState(ws);
    const refused = keyHash === undefined ? null : await s.backend().checkRate(keyHash);
    if (refused) throw refused;
    if (!frame) return send(ws, errorFrame("invalid_frame", (parsed as { invalid: string }).invalid));
    const identity = await s.store.identity();
    if (!identity) return send(ws, errorFrame("internal", "session has no identity"));
    if (frame.type === "message") await onMessage(s, ws, identity, frame);
    else if (frame.type === "cancel") await onCancel(s, ws, identity, frame.job_id);
    else if (frame.type === "decision") await onDecision(s, ws, identity, frame);
    else await onResume(s, ws, identity, frame.job_id, frame.after);
  } catch (err) {
    const code = err instanceof ApiError && isChatErrorCode(err.code) ? err.code : "internal";
    if (code === "internal") log.error("chat frame failed", { error: err });
    const cmid = frame?.type === "message" ? frame.client_message_id : undefined;
    const retryAfterS = err instanceof ApiError ? err.retryAfterS : undefined;
    send(ws, {
      ...errorFrame(code, code === "internal" ? "the frame could not be handled" : (err as Error).message),
      ...(cmid ? { client_message_id: cmid } : {}),
      ...(retryAfterS === undefined ? {} : { retry_after_s: retryAfterS }),
    });
  }
}

async function onCancel(s: Session, ws: WebSocket, identity: Identity, jobId: string): Promise<void> {
  if (!(await belongsHere(s, identity, jobId)))
    return send(ws, errorFrame("not_found", `no job ${jobId} in this conversation`));
  const status = await s.backend().cancel(identity.tenantId, jobId);
  send(ws, { type: "cancel", job_id: jobId, status });
}

async function onDecision(
  s: Session,
  ws: WebSocket,
  identity: Identity,
  frame: Extract<ClientFrame, { type: "decision" }>,
): Promise<void> {
  if (!(await belongsHere(s, identity, frame.job_id)))
    return send(ws, errorFrame("not_found", `no job ${frame.job_id} in this conversation`));
  const answer = await s.backend().decide(identity.tenantId, frame.job_id, frame.call_id, {
    decision: frame.decision,
    ...(frame.note === undefined ? {} : { note: frame.note }),
    ...(frame.add_usd === undefined ? {} : { add_usd: frame.add_usd }),
  });
  if (!answer) return send(ws, errorFrame("not_found", `job ${frame.job_id} never waited on call ${frame.call_id}`));
  send(ws, { type: "decision", job_id: frame.job_id, ...answer });
}

async function onResume(s: Session, ws: WebSocket, identity: Identity, jobId: string, after: number): Promise<void> {
  if (!(await belongsHere(s, identity, jobId)))
    return send(ws, errorFrame("not_found", `no job ${jobId} in this conversation`));
  const state = socketState(ws);
  state.cursors[jobId] = after;
  ws.serializeAttachment(state);
  const jobs = await s.store.jobs();
  if (!jobs[jobId]?.finished) await watch(s, identity, jobId);
  await deliver(s, jobId);
}

/** A job of this conversation: known here already, or so in Postgres (then remembered). */
async function belongsHere(s: Session, identity: Identity, jobId: string): Promise<boolean> {
  const jobs = await s.store.jobs();
  if (jobs[jobId]) return true;
  const job: JobView | null = await s.backend().findJob(identity.tenantId, jobId);
  if (!job || job.conversation_id !== identity.conversationId) return false;
  jobs[jobId] = { relayed: 0, finished: false };
  await s.store.saveJobs(jobs);
  return true;
}
