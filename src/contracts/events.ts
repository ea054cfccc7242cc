/**
 * The event envelope hosts emit and clients receive, and the signed ingest batch between them.
 * `seq` counts per execution from 1; the projector assigns the per-job `offset` clients resume by.
 */
import { z } from "zod";

export const TERMINAL_EVENT_TYPES = [
  "run.completed",
  "run.failed",
  "run.cancelled",
  "run.lost",
  "run.timed_out",
] as const;
export type TerminalEventType = (typeof TERMINAL_EVENT_TYPES)[number];

export const EVENT_TYPES = [
  "run.started",
  "run.prepared",
  "quota.waiting",
  "model.delta",
  "tool.call",
  "tool.result",
  "sandbox.created",
  "input.accepted",
  "cancel.accepted",
  ...TERMINAL_EVENT_TYPES,
] as const;
export type EventType = (typeof EVENT_TYPES)[number];

export function isTerminalEventType(type: string): type is TerminalEventType {
  return (TERMINAL_EVENT_TYPES as readonly string[]).includes(type);
}

export const EventEnvelopeSchema = z.object({
  job_id: z.string().min(1).max(100),
  execution_id: z.string().min(1).max(100),
  epoch: z.number().int().min(0),
  seq: z.number().int().min(1),
  type: z.enum(EVENT_TYPES),
  payload: z.record(z.string(), z.unknown()),
  ts: z.string(),
});
export type EventEnvelope = z.infer<typeof EventEnvelopeSchema>;

/**
 * One batch from a host's outbox: events of one job, in seq order. `mac` is the batch's HMAC with
 * its execution's ingest key (src/domain/signing.ts `batchMac`) over the request nonce, the job id
 * and `JSON.stringify(events)` as it appears on the wire.
 */
export const IngestBatchSchema = z.object({
  job_id: z.string().min(1).max(100),
  events: z.array(EventEnvelopeSchema).min(1).max(1000),
  mac: z.string().regex(/^[0-9a-f]{64}$/, "mac must be 64 lower-case hex characters"),
});
export type IngestBatch = z.infer<typeof IngestBatchSchema>;

/**
 * Several jobs' batches in one signed request: a host sends every stream that is due together,
 * so the gateway sees one request per flush, not one per running job. Job ids are unique within
 * a request (each job's batch stays one ordered unit); the body limit bounds the total.
 */
export const IngestMultiSchema = z.object({
  batches: z
    .array(IngestBatchSchema)
    .min(1)
    .max(500)
    .refine((bs) => new Set(bs.map((b) => b.job_id)).size === bs.length, "job_id must be unique within a request"),
});
export type IngestMulti = z.infer<typeof IngestMultiSchema>;

export const IngestAckSchema = z.object({
  /** Highest seq of this execution that the projector holds durably (contiguous from 1). */
  acked_seq: z.number().int().min(0),
  /** Events appended by this batch. */
  accepted: z.number().int().min(0),
  /** Events already held (dropped). */
  duplicates: z.number().int().min(0),
  /** Events of this execution held past a gap, not acknowledged yet. */
  buffered: z.number().int().min(0),
  /** Events refused because the gap buffer is full; the host resends them. */
  deferred: z.number().int().min(0),
});
export type IngestAck = z.infer<typeof IngestAckSchema>;

/** The answer to a multi-job request: one result per batch, in request order. */
export const IngestMultiResultSchema = z.discriminatedUnion("status", [
  z.object({ job_id: z.string(), status: z.literal(200), ack: IngestAckSchema }),
  z.object({
    job_id: z.string(),
    status: z.literal([400, 403, 409, 503]),
    error: z.object({
      code: z.enum(["invalid_request", "forbidden", "conflict", "dependency_unavailable"]),
      message: z.string(),
    }),
  }),
]);
export type IngestMultiResult = z.infer<typeof IngestMultiResultSchema>;
export const IngestMultiAnswerSchema = z.object({ results: z.array(IngestMultiResultSchema) });

/** Headers of a signed internal request (see src/domain/signing.ts). */
export const INTERNAL_HEADERS = {
  timestamp: "x-ear-timestamp",
  nonce: "x-ear-nonce",
  signature: "x-ear-signature",
} as const;
