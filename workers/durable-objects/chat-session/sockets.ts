/**
 * The session's WebSockets (hibernation API): each socket's state kept in its attachment, so it
 * survives hibernation, and sending. A send to a socket that is closing is dropped: its close
 * handler cleans up, and the client resumes by cursor.
 */
import type { MultitaskPolicy, ServerFrame } from "../../../src/contracts/chat";

/** Per socket, survives hibernation (≤ 2 KB): its policy and, per followed job, the last offset sent. */
export interface SocketState {
  multitask: MultitaskPolicy;
  /** The connection's default agent reference, for messages that name none. */
  agent?: string;
  cursors: Record<string, number>;
  /** The tenant stream lease this socket holds (tenant-streams/stream-leases.ts), if counted. */
  lease?: string;
  /** The key whose request rate every frame of this socket counts against. */
  keyHash?: string;
}

export function socketState(ws: WebSocket): SocketState {
  const s = ws.deserializeAttachment() as SocketState | null;
  return s ?? { multitask: "queue", cursors: {} };
}

export function send(ws: WebSocket, frame: ServerFrame): void {
  sendRaw(ws, JSON.stringify(frame));
}

export function sendRaw(ws: WebSocket, text: string): void {
  try {
    ws.send(text);
  } catch {
    // The socket is closing; its close handler cleans up, and the client resumes by cursor.
  }
}

export function broadcast(ctx: DurableObjectState, frame: ServerFrame): void {
  const text = JSON.stringify(frame);
  for (const ws of ctx.getWebSockets()) sendRaw(ws, text);
}

/** Answer the client's close; workerd refuses to send 1005/1006 (they mean "no code" / "abnormal"): answer 1000. */
export function closeSocket(ws: WebSocket, code: number, reason: string): void {
  try {
    ws.close(code === 1005 || code === 1006 ? 1000 : code, reason);
  } catch {}
}
