/**
 * WebSocket chat frames (docs/api.md, Conversations). Client → server frames are validated with
 * these schemas; a frame that fails gets an `error` frame and the connection stays open.
 */
import { z } from "zod";
import { agentRefSchema } from "./agent";
import { EventEnvelopeSchema } from "./events";
import { CANCEL_OUTCOMES, JobViewSchema, LatencyViewSchema, LIMITS } from "./job";
import { text } from "./text";
import { ApprovalAnswerSchema, ApprovalBodySchema, WAIT_KINDS } from "./wait";

export const MULTITASK_POLICIES = ["queue", "reject", "interrupt"] as const;
export type MultitaskPolicy = (typeof MULTITASK_POLICIES)[number];

/** Messages waiting behind a running job, per conversation; more is a client bug, not a queue. */
export const MAX_QUEUED_MESSAGES = 16;

const clientMessageId = text()
  .min(1)
  .max(100)
  .regex(/^[A-Za-z0-9._:-]+$/, "may contain only letters, digits and . _ : -");

export const ClientMessageFrameSchema = z.object({
  type: z.literal("message"),
  content: text().min(1).max(LIMITS.maxMessageChars),
  client_message_id: clientMessageId,
  multitask: z.enum(MULTITASK_POLICIES).optional(),
  /** The agent this message's job runs (`name` or `name@N`); default: the connection's `?agent=`, else none. */
  agent: agentRefSchema.optional(),
  /**
   * A W3C traceparent for this message's job (a browser cannot set headers on a WebSocket):
   * kept with the job when valid (a link, or the parent if the operator trusts clients), like
   * POST /v1/jobs's header; ignored when not.
   */
  traceparent: text().max(100).optional(),
});

export const ClientCancelFrameSchema = z.object({
  type: z.literal("cancel"),
  job_id: text().min(1).max(100),
});

export const ClientResumeFrameSchema = z.object({
  type: z.literal("resume"),
  job_id: text().min(1).max(100),
  after: z.number().int().min(0).max(Number.MAX_SAFE_INTEGER),
});

/**
 * Approve or deny the call a job of this conversation waits on (as POST /v1/jobs/{id}/approvals/{call_id}):
 * a tool call, or a budget wait (`add_usd` required to approve it, refused on any other).
 */
export const ClientDecisionFrameSchema = z.object({
  type: z.literal("decision"),
  job_id: text().min(1).max(100),
  call_id: text().min(1).max(200),
  decision: ApprovalBodySchema.shape.decision,
  note: ApprovalBodySchema.shape.note,
  add_usd: ApprovalBodySchema.shape.add_usd,
});

export const ClientFrameSchema = z.discriminatedUnion("type", [
  ClientMessageFrameSchema,
  ClientCancelFrameSchema,
  ClientResumeFrameSchema,
  ClientDecisionFrameSchema,
]);
export type ClientFrame = z.infer<typeof ClientFrameSchema>;
export type ClientMessageFrame = z.infer<typeof ClientMessageFrameSchema>;

export const CHAT_ERROR_CODES = [
  "invalid_frame",
  "conversation_busy",
  "queue_full",
  "not_found",
  "rate_limited",
  /** The tenant's daily budget is spent; `retry_after_s` runs to the next UTC midnight. */
  "budget_exceeded",
  "dependency_unavailable",
  "idempotency_mismatch",
  /** The message's agent is unknown, or its model is not offered to the tenant. */
  "invalid_request",
  /** The message's agent is archived. */
  "conflict",
  "internal",
] as const;
export type ChatErrorCode = (typeof CHAT_ERROR_CODES)[number];

/** An ApiError whose code a chat client is told as is (others become `internal`). */
export function isChatErrorCode(code: string): code is ChatErrorCode {
  return code !== "internal" && (CHAT_ERROR_CODES as readonly string[]).includes(code);
}

export const ServerJobFrameSchema = z.object({
  type: z.literal("job"),
  job: JobViewSchema,
  client_message_id: z.string().optional(),
});
export const ServerEventFrameSchema = z.object({
  type: z.literal("event"),
  offset: z.number().int().min(1),
  event: EventEnvelopeSchema,
});
export const ServerQueuedFrameSchema = z.object({
  type: z.literal("queued"),
  client_message_id: z.string(),
  position: z.number().int().min(1),
});
export const ServerCancelFrameSchema = z.object({
  type: z.literal("cancel"),
  job_id: z.string(),
  status: z.enum([...CANCEL_OUTCOMES, "not_found"]),
});
/**
 * A job of the conversation waits for a person: sent to each socket following the job right
 * after the `tool.approval_requested`, `input.requested` or `budget.exhausted` event it comes
 * from (same offset). Answer an approval with a `decision` frame (a budget wait's approval with
 * `add_usd`), a question with POST /v1/jobs/{id}/input.
 */
export const ServerApprovalRequestFrameSchema = z.object({
  type: z.literal("approval_request"),
  job_id: z.string(),
  offset: z.number().int().min(1),
  kind: z.enum(WAIT_KINDS),
  call_id: z.string(),
  tool: z.string(),
  arguments: z.unknown(),
  question: z.string().nullable(),
  deadline_at: z.string(),
});
/** The recorded decision (the first one; a repeat of it gets the same frame). */
export const ServerDecisionFrameSchema = ApprovalAnswerSchema.extend({
  type: z.literal("decision"),
  job_id: z.string(),
});
export const ServerErrorFrameSchema = z.object({
  type: z.literal("error"),
  error: z.object({ code: z.enum(CHAT_ERROR_CODES), message: z.string() }),
  client_message_id: z.string().optional(),
  /** On `rate_limited`: whole seconds until a frame may be admitted again (as HTTP's Retry-After). */
  retry_after_s: z.number().int().min(1).optional(),
});
export const ServerFrameSchema = z.discriminatedUnion("type", [
  ServerJobFrameSchema,
  ServerEventFrameSchema,
  ServerQueuedFrameSchema,
  ServerCancelFrameSchema,
  ServerApprovalRequestFrameSchema,
  ServerDecisionFrameSchema,
  ServerErrorFrameSchema,
]);
export type ServerFrame = z.infer<typeof ServerFrameSchema>;

/** One turn of GET /v1/conversations/:id/messages: a job's user input, then its answer. */
export const ConversationMessageSchema = z.object({
  role: z.enum(["user", "assistant"]),
  content: z.string(),
  job_id: z.uuid(),
  /** The job's latency for an answer; null on the user's turn. */
  latency: LatencyViewSchema.nullable(),
});
export type ConversationMessage = z.infer<typeof ConversationMessageSchema>;
export const ConversationMessagesSchema = z.object({ messages: z.array(ConversationMessageSchema) });
