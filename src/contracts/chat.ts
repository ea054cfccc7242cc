/**
 * WebSocket chat frames (API.md "Conversations"). Client → server frames are validated with
 * these schemas; a frame that fails gets an `error` frame and the connection stays open.
 */
import { z } from "zod";
import type { EventEnvelope } from "./events";
import { type JobView, LIMITS } from "./job";

export const MULTITASK_POLICIES = ["queue", "reject", "interrupt"] as const;
export type MultitaskPolicy = (typeof MULTITASK_POLICIES)[number];

/** Messages waiting behind a running job, per conversation; more is a client bug, not a queue. */
export const MAX_QUEUED_MESSAGES = 16;

const clientMessageId = z
  .string()
  .min(1)
  .max(100)
  .regex(/^[A-Za-z0-9._:-]+$/, "may contain only letters, digits and . _ : -");

export const ClientMessageFrameSchema = z.object({
  type: z.literal("message"),
  content: z.string().min(1).max(LIMITS.maxMessageChars),
  client_message_id: clientMessageId,
  multitask: z.enum(MULTITASK_POLICIES).optional(),
});

export const ClientCancelFrameSchema = z.object({
  type: z.literal("cancel"),
  job_id: z.string().min(1).max(100),
});

export const ClientResumeFrameSchema = z.object({
  type: z.literal("resume"),
  job_id: z.string().min(1).max(100),
  after: z.number().int().min(0).max(Number.MAX_SAFE_INTEGER),
});

export const ClientFrameSchema = z.discriminatedUnion("type", [
  ClientMessageFrameSchema,
  ClientCancelFrameSchema,
  ClientResumeFrameSchema,
]);
export type ClientFrame = z.infer<typeof ClientFrameSchema>;
export type ClientMessageFrame = z.infer<typeof ClientMessageFrameSchema>;

export const CHAT_ERROR_CODES = [
  "invalid_frame",
  "conversation_busy",
  "queue_full",
  "not_found",
  "rate_limited",
  "dependency_unavailable",
  "internal",
] as const;
export type ChatErrorCode = (typeof CHAT_ERROR_CODES)[number];

export type ServerFrame =
  | { type: "job"; job: JobView; client_message_id?: string }
  | { type: "event"; offset: number; event: EventEnvelope }
  | { type: "queued"; client_message_id: string; position: number }
  | { type: "cancel"; job_id: string; status: "cancelled" | "requested" | "already_finished" | "not_found" }
  | { type: "error"; error: { code: ChatErrorCode; message: string }; client_message_id?: string };
