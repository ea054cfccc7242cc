/**
 * Conversations (docs/api.md): the chat WebSocket and the history.
 *
 * GET /v1/conversations/:id/ws — the credential (a header, or a token in `?access_token=`) was checked by the /v1
 * middleware before anything is upgraded, so a bad key is a JSON 401 and never a socket. The
 * upgrade is handed to the tenant's ChatSession for this conversation, named `tenant:conversation`.
 * A conversation id is the client's own (like POST /v1/jobs's `conversation_id`), scoped by
 * tenant: another tenant's conversation of the same id is simply a different, empty one here.
 *
 * GET /v1/conversations/:id/messages — the turns of the tenant's jobs in that conversation,
 * oldest first; a conversation the tenant has no job in (including another tenant's) is 404.
 *
 * POST /v1/conversations/:id/jobs/:job_id/approvals/:call_id — the approvals route of
 * job-control.ts under the conversation, so a page's conversation-bound token (which reaches only
 * /v1/conversations/<its id>/…, access-tokens.ts) can decide its own chat's tool calls: a job of
 * another conversation is a 403, never decided, whoever asks.
 */
import { agentRefSchema } from "../../src/contracts/agent";
import { CHAT_ERROR_CODES, ConversationMessagesSchema, MULTITASK_POLICIES } from "../../src/contracts/chat";
import { ApiError } from "../../src/contracts/errors";
import { CreateJobBodySchema, conversationIdSchema } from "../../src/contracts/job";
import { callIdParam, conversationIdParam, inline, ref, V1_ERRORS } from "../../src/contracts/openapi";
import { ApprovalBodySchema } from "../../src/contracts/wait";
import { conversationMessages, listConversationJobsOldestFirst } from "../../src/db/conversations-repo";
import { getJob } from "../../src/db/jobs-repo";
import { decide } from "../commands/decide";
import { callDependency, callDurableObject } from "../deps";
import { CHAT_HEADERS, chatSessionName } from "../durable-objects/chat-session/session-address";
import { APPROVAL_ERRORS, APPROVAL_RESPONSES } from "./job-control";
import { missingJob } from "./jobs";
import { route, routes } from "./route";

/** History reads return at most this many jobs' turns. */
const HISTORY_MAX_JOBS = 500;

function conversationId(raw: string): string {
  if (!conversationIdSchema.safeParse(raw).success) {
    throw new ApiError("not_found", "conversation not found");
  }
  return raw;
}

export const conversationRoutes = routes(
  route({
    method: "get",
    path: "/:id/ws",
    operationId: "chatSocket",
    tag: "conversations",
    summary: "The conversation's chat WebSocket",
    description:
      "A WebSocket upgrade (`Upgrade: websocket`). Frames are JSON text: the client sends ClientFrame, the server sends ServerFrame (see `x-websocket`). A frame that fails gets an `error` frame and the connection stays open. A bad credential is a JSON 401 (403 for a read token or one bound elsewhere: the socket submits jobs) before any upgrade. A browser passes a write token in `access_token`; an API key is never accepted in the URL.",
    auth: "url_token",
    parameters: [
      conversationIdParam,
      {
        name: "multitask",
        in: "query",
        required: false,
        description: "The connection's default policy while a job of the conversation runs.",
        schema: { type: "string", enum: [...MULTITASK_POLICIES], default: "queue" },
      },
      {
        name: "agent",
        in: "query",
        required: false,
        description:
          "The agent (`name` or `name@N`) the connection's messages run when a message names none; resolved at each message's submit.",
        schema: inline(CreateJobBodySchema.shape.agent),
      },
      { name: "Upgrade", in: "header", required: true, schema: { type: "string", const: "websocket" } },
    ],
    responses: [{ status: 101, description: "Switched to the WebSocket protocol." }],
    errors: ["invalid_request", "not_found", ...V1_ERRORS],
    extensions: {
      "x-websocket": {
        "client-frames": ref("ClientFrame"),
        "server-frames": ref("ServerFrame"),
        "error-frame-codes": [...CHAT_ERROR_CODES],
      },
    },
    handler: async (c) => {
      const id = conversationId(c.req.param("id"));
      if (c.req.header("upgrade")?.toLowerCase() !== "websocket") {
        throw new ApiError("invalid_request", "this route needs a WebSocket upgrade (Upgrade: websocket)");
      }
      const multitask = c.req.query("multitask") ?? "queue";
      if (!(MULTITASK_POLICIES as readonly string[]).includes(multitask)) {
        throw new ApiError("invalid_request", `multitask: must be one of ${MULTITASK_POLICIES.join(", ")}`);
      }
      const agent = c.req.query("agent");
      if (agent !== undefined && !agentRefSchema.safeParse(agent).success) {
        throw new ApiError("invalid_request", 'agent: must be an agent name or "name@version"');
      }
      const tenantId = c.get("tenantId");
      const stub = c.env.CHAT_SESSIONS.get(c.env.CHAT_SESSIONS.idFromName(chatSessionName(tenantId, id)));
      const headers = new Headers(c.req.raw.headers);
      headers.delete("authorization"); // the object needs the tenant, never the key
      headers.set(CHAT_HEADERS.tenant, tenantId);
      headers.set(CHAT_HEADERS.conversation, id);
      headers.set(CHAT_HEADERS.multitask, multitask);
      // Resolved per message, at its submit (the latest version then), like a job's `agent`.
      if (agent !== undefined) headers.set(CHAT_HEADERS.agent, agent);
      else headers.delete(CHAT_HEADERS.agent);
      headers.set(CHAT_HEADERS.streamCap, String(c.get("config").limits.maxStreamsPerTenant));
      // Frames bypass the /v1 rate limit once upgraded: the object counts each against this key.
      headers.set(CHAT_HEADERS.keyHash, c.get("apiKeyHash"));
      return callDurableObject(() => stub.fetch("https://chat-session/ws", { headers }));
    },
  }),
  route({
    method: "get",
    path: "/:id/messages",
    operationId: "conversationMessages",
    tag: "conversations",
    summary: "The conversation's turns, oldest first, from its jobs",
    auth: "bearer",
    parameters: [conversationIdParam],
    responses: [{ status: 200, description: "The turns.", schema: ConversationMessagesSchema }],
    errors: ["not_found", ...V1_ERRORS],
    handler: async (c) => {
      const id = conversationId(c.req.param("id"));
      const db = c.get("deps").db();
      const rows = await callDependency("postgres", () =>
        listConversationJobsOldestFirst(db, c.get("tenantId"), id, HISTORY_MAX_JOBS),
      );
      if (rows.length === 0) throw new ApiError("not_found", "conversation not found");
      return c.json({ messages: conversationMessages(rows) });
    },
  }),
  route({
    method: "post",
    path: "/:id/jobs/:job_id/approvals/:call_id",
    operationId: "decideConversationApproval",
    tag: "conversations",
    summary: "Approve or deny a waiting tool call of one of the conversation's jobs",
    description:
      "POST /v1/jobs/{id}/approvals/{call_id} for a job of this conversation, reachable with the conversation-bound token a chat page holds. A job of another conversation is a 403 `forbidden` (nothing is decided); otherwise as that route: 202 recorded, 200 the same decision again, 409 a different one.",
    auth: "bearer",
    parameters: [
      conversationIdParam,
      {
        name: "job_id",
        in: "path",
        required: true,
        description: "The job (a UUID) of this conversation that waits on the call.",
        schema: { type: "string" },
      },
      callIdParam,
    ],
    body: ApprovalBodySchema,
    responses: APPROVAL_RESPONSES,
    errors: APPROVAL_ERRORS,
    handler: async (c, input) => {
      const id = conversationId(c.req.param("id"));
      const body = await input.body();
      const db = c.get("deps").db();
      const [tenantId, jobId, callId] = [c.get("tenantId"), c.req.param("job_id"), c.req.param("call_id")];
      const job = await callDependency("postgres", () => getJob(db, tenantId, jobId));
      if (!job) throw await missingJob(db, tenantId, jobId);
      if (job.conversationId !== id) throw new ApiError("forbidden", `job ${jobId} is not in conversation ${id}`);
      const answer = await decide(c.get("deps"), tenantId, jobId, callId, body, (w) => c.executionCtx.waitUntil(w));
      if (answer === null) throw await missingJob(db, tenantId, jobId);
      return c.json(answer.body, answer.created ? 202 : 200);
    },
  }),
);
