/**
 * A new WebSocket: the upgrade the gateway forwards (routes/conversations.ts, after auth). The
 * object learns who it is from the first one and refuses any that names another tenant or
 * conversation; the tenant's stream slot is taken before the upgrade, so past the cap the client
 * gets a 429 instead of a socket.
 */
import { MULTITASK_POLICIES, type MultitaskPolicy } from "../../../src/contracts/chat";
import { acquireStreamSlot } from "../tenant-streams/stream-leases";
import type { Session } from "./session";
import { CHAT_HEADERS } from "./session-address";
import { armLeaseRenewal } from "./socket-leases";
import type { SocketState } from "./sockets";

export async function acceptSocket(s: Session, request: Request): Promise<Response> {
  if (request.headers.get("upgrade")?.toLowerCase() !== "websocket") {
    return new Response("expected a WebSocket upgrade", { status: 426 });
  }
  const tenantId = request.headers.get(CHAT_HEADERS.tenant);
  const conversationId = request.headers.get(CHAT_HEADERS.conversation);
  if (!tenantId || !conversationId) return new Response("missing identity", { status: 400 });
  const known = await s.store.identity();
  if (!known) await s.store.saveIdentity({ tenantId, conversationId });
  else if (known.tenantId !== tenantId || known.conversationId !== conversationId) {
    return new Response("identity mismatch", { status: 403 });
  }
  const policy = request.headers.get(CHAT_HEADERS.multitask) ?? "queue";
  const multitask = (MULTITASK_POLICIES as readonly string[]).includes(policy) ? (policy as MultitaskPolicy) : "queue";

  // The tenant's stream slot is taken before the upgrade: past the cap the client gets a 429.
  const slot = await acquireStreamSlot(s.env, tenantId, "ws", Number(request.headers.get(CHAT_HEADERS.streamCap) ?? 0));
  if (slot instanceof Response) return slot;

  const pair = new WebSocketPair();
  const [client, server] = [pair[0], pair[1]];
  s.ctx.acceptWebSocket(server);
  // A new connection follows the jobs submitted after it connects, and whatever it `resume`s.
  // It does not start following a job already running: events pushed before its `resume`
  // frame arrives would reach it ahead of the replay (out of order, then again). A client that
  // reconnects resumes with its cursor; one that knows nothing resumes with after=0.
  const agent = request.headers.get(CHAT_HEADERS.agent) ?? undefined;
  const keyHash = request.headers.get(CHAT_HEADERS.keyHash) ?? undefined;
  server.serializeAttachment({
    multitask,
    cursors: {},
    ...(agent ? { agent } : {}),
    ...(slot ? { lease: slot } : {}),
    ...(keyHash ? { keyHash } : {}),
  } satisfies SocketState);
  if (slot) await armLeaseRenewal(s);
  return new Response(null, { status: 101, webSocket: client });
}
