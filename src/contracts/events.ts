/**
 * The event envelope hosts emit and clients receive, and the signed ingest batch between them.
 * `seq` counts per execution from 1; the projector assigns the per-job `offset` clients resume by.
 */
import { z } from "zod";
import { utf8Bytes } from "./text";
import { WAIT_DECISIONS, WAIT_KINDS } from "./wait";

export const TERMINAL_EVENT_TYPES = [
  "run.completed",
  "run.failed",
  "run.cancelled",
  "run.lost",
  "run.timed_out",
  "run.expired",
] as const;
export type TerminalEventType = (typeof TERMINAL_EVENT_TYPES)[number];

export const EVENT_TYPES = [
  "run.started",
  "run.prepared",
  "quota.waiting",
  "model.turn",
  "model.delta",
  "model.retry",
  "tool.call",
  "tool.result",
  "tool.approval_requested",
  "input.requested",
  "budget.exhausted",
  "run.suspended",
  "run.resumed",
  "run.recovered",
  "run.forked",
  "sandbox.waiting",
  "sandbox.created",
  "input.accepted",
  "cancel.accepted",
  "child.created",
  "child.finished",
  ...TERMINAL_EVENT_TYPES,
] as const;
export type EventType = (typeof EVENT_TYPES)[number];

/**
 * Why a model turn starts (`model.turn`): the run's first turn, the turn after the previous one's
 * tool results, the one repair turn after an answer the response_format refused, the first turn of
 * an execution that resumed from a wait, the turn that takes input sent during the last one,
 * the same turn asked again because its quota lease was lost mid-call (its text so far is void),
 * the first turn of an execution that recovered the job from its journal (run.recovered), the
 * first turn of a fork (run.forked), or the same turn sent on to the agent's next model after its
 * call was refused before its first token (`fallback`, with `from`, `to`, `error`, `status`).
 * Readers must accept reasons not listed here (more may come).
 */
export const MODEL_TURN_REASONS = [
  "start",
  "tool_results",
  "repair",
  "resumed",
  "input",
  "lease_lost",
  "recovered",
  "forked",
  "fallback",
] as const;
export type ModelTurnReason = (typeof MODEL_TURN_REASONS)[number];

export function isTerminalEventType(type: string): type is TerminalEventType {
  return (TERMINAL_EVENT_TYPES as readonly string[]).includes(type);
}

/**
 * One payload schema per event type: what a host emits (sandbox-host/runner/) and, for the
 * lifecycle types, what the projector writes from Postgres (workers/durable-objects/job-events/postgres-facts.ts:
 * `source: "projector"` and the row's output or error). The host's `emit` and every reader take
 * their types from here.
 *
 * Fields beyond the ones named are kept as sent, neither stripped nor refused. The batch mac
 * covers the raw JSON a host sent (routes/internal-events.ts), so stripping would store something
 * other than what was signed; refusing would turn a host one release ahead of its gateway into a
 * permanent 400 (the outbox drops permanently refused batches), losing events during a rolling
 * deploy. What is named is checked: a known field of the wrong type is a 400.
 */
const fromProjector = z.literal("projector");
/**
 * A job error inside an event: the code is a string here, not the closed JOB_ERROR_CODES set the
 * Job view uses. A host one release ahead may write a code this gateway does not know yet, and a
 * refused batch is dropped by the outbox (see above); the job row's code is what the Job shows.
 */
const eventJobError = z.object({ code: z.string().min(1), message: z.string() });
/** A terminal event the projector wrote from the job row (no host delivered one). */
const projected = z.looseObject({
  source: fromProjector,
  output: z.string().optional(),
  error: eventJobError.optional(),
});

export type ProjectedPayload = z.infer<typeof projected>;

/** The mark of a payload cut to fit an event (capEventPayload); named where big values occur. */
const truncationFields = {
  truncated: z.literal(true).optional(),
  original_bytes: z.number().int().min(0).optional(),
};

export const EVENT_PAYLOAD_SCHEMAS = {
  /** No host id: which machine ran a job is the operator's business (it is in the host's log). */
  "run.started": z.looseObject({ source: fromProjector.optional() }),
  "run.prepared": z.looseObject({}),
  "quota.waiting": z.looseObject({
    reason: z.enum(["limit_reached", "redis_unavailable"]),
    /** The quota key refusing (`model:<name>`, `tenant:<id>`), or null. */
    key: z.string().nullable(),
    /** Waiters ahead, or null. */
    ahead: z.number().int().min(0).nullable(),
  }),
  /**
   * A model turn starts: every `model.delta` after it (until the next) is that turn's text, and
   * the run's answer is its last turn's text. `turn` counts the run's turns from 1 across its
   * executions (the number `max_turns` bounds); `reason` is one of MODEL_TURN_REASONS, or a
   * reason a newer host sends (kept as a string: a gateway must not refuse it).
   */
  "model.turn": z.looseObject({ turn: z.number().int().min(1), reason: z.string().min(1) }),
  "model.delta": z.looseObject({ text: z.string() }),
  /**
   * A model call failed before it produced output and will be tried again after `delay_ms`
   * (the turn's quota slot is released meanwhile). `attempt` is the attempt that failed (1 = the
   * first); `reason` the failure's code (rate_limited, provider_error, network_error); `status`
   * the provider's HTTP status, or null.
   */
  "model.retry": z.looseObject({
    attempt: z.number().int().min(1),
    delay_ms: z.number().int().min(0),
    reason: z.string(),
    status: z.number().int().nullable(),
  }),
  /** `server`: the MCP server of an MCP tool (`name` is then `<server>__<tool>`); absent for sandbox tools. */
  "tool.call": z.looseObject({
    id: z.string(),
    name: z.string(),
    args: z.unknown(),
    server: z.string().optional(),
    ...truncationFields,
  }),
  /**
   * `ok: true` → the tool's output object; `ok: false` → `{code, message}`. Like every payload,
   * cut to MAX_EVENT_PAYLOAD_BYTES when bigger (`truncated`, `original_bytes`: capEventPayload).
   */
  "tool.result": z.looseObject({
    id: z.string(),
    ok: z.boolean(),
    output: z.unknown(),
    server: z.string().optional(),
    ...truncationFields,
  }),
  /**
   * The model called a tool that requires approval: the run suspends (run.suspended follows) until
   * POST /v1/jobs/{id}/approvals/{call_id} decides, or the deadline passes.
   */
  "tool.approval_requested": z.looseObject({
    call_id: z.string(),
    tool: z.string(),
    arguments: z.unknown(),
    deadline_at: z.string(),
    /** Why a person is asked again: an approved call's outcome is unknown after a recovery. */
    note: z.string().optional(),
  }),
  /**
   * The job tree's max_cost_usd refused the next model call and its `limits.on_budget` is `ask`:
   * the run suspends (run.suspended follows) until POST /v1/jobs/{id}/approvals/{call_id} decides
   * (approve with `add_usd` raises the limit; deny fails the job `budget_exceeded`), or the
   * deadline passes. `spent_usd`: the tree's settled spend; `limit_usd`: its limit then.
   */
  "budget.exhausted": z.looseObject({
    call_id: z.string(),
    spent_usd: z.number().min(0),
    limit_usd: z.number().min(0),
    /** The model whose call was refused (`waiting_for.tool`); absent in events from before it was sent. */
    model: z.string().optional(),
    deadline_at: z.string(),
  }),
  /** The model asked the user (ask_user): the run suspends until POST /v1/jobs/{id}/input answers. */
  "input.requested": z.looseObject({ call_id: z.string(), question: z.string(), deadline_at: z.string() }),
  /** The execution ended cleanly at a waitpoint; the job is `waiting` and no host holds it. */
  "run.suspended": z.looseObject({
    waiting_for: z.looseObject({ kind: z.enum(WAIT_KINDS), call_id: z.string(), tool: z.string() }),
  }),
  /**
   * The first event of the execution that resumes from the checkpoint: how the wait ended
   * (`approve`, `deny`, `input`; `by: "deadline"` when nobody answered in time; `children`, by
   * `children`, when the turn's last child job ended) and how long it was.
   */
  "run.resumed": z.looseObject({
    call_id: z.string(),
    decision: z.enum(WAIT_DECISIONS),
    by: z.enum(["api", "deadline", "children"]),
    waited_ms: z.number().int().min(0),
  }),
  /**
   * The first event of an execution that continues a job from its journal after the last one's
   * host was lost (`host_lost`) or handed it off at shutdown (`host_shutdown`). `from_step`: the
   * journal row it continues after (0: from the start); `discarded_turn`: a model turn that had
   * not completed is asked again (its deltas before this event are void: a client rebuilds the
   * answer from the `model.delta` events after the last `run.recovered`); `unknown_calls`: tool
   * calls in flight at the loss (idempotent ones are made again with the same idempotency key,
   * the others get the result `outcome_unknown`); `sandbox_reset`: the run had a sandbox, and
   * its workspace is gone (the model is told). Projected (`source: "projector"`) when the
   * execution delivered no event of its own (its host died first): `reason` and `from_step`
   * always, the other three only if it had written its journal `recovered` row.
   */
  "run.recovered": z.union([
    z.looseObject({
      reason: z.string().min(1),
      from_step: z.number().int().min(0),
      discarded_turn: z.boolean(),
      unknown_calls: z.array(z.string()),
      sandbox_reset: z.boolean(),
    }),
    z.looseObject({
      source: fromProjector,
      reason: z.string().min(1),
      from_step: z.number().int().min(0),
      discarded_turn: z.boolean().optional(),
      unknown_calls: z.array(z.string()).optional(),
      sandbox_reset: z.boolean().optional(),
    }),
  ]),
  /**
   * The first event of a fork's first execution (POST /v1/jobs/{id}/fork, …/rerun): it continues
   * after step `from_step` of job `from_job`, whose steps it was created with (read, never
   * changed; their tool calls are not made again). Projected (`source: "projector"`) when the
   * execution delivered no event of its own.
   */
  "run.forked": z.looseObject({
    from_job: z.string(),
    from_step: z.number().int().min(0),
    source: fromProjector.optional(),
  }),
  /** The run's first tool call waits for a sandbox creation turn; `ahead` creations are queued before it. */
  "sandbox.waiting": z.looseObject({ ahead: z.number().int().min(0) }),
  "sandbox.created": z.looseObject({}),
  "input.accepted": z.looseObject({ input_id: z.string(), content: z.string() }),
  /** How the host learned of the cancel (null: it was not told which way). */
  "cancel.accepted": z.looseObject({ via: z.enum(["hint", "durable"]).nullable() }),
  /** A delegate call created child job `job_id` (agent `agent`); the run waits for the turn's children. */
  "child.created": z.looseObject({ job_id: z.string(), call_id: z.string(), agent: z.string() }),
  /**
   * A child of the turn ended (written by the execution that resumes, so every child.finished of
   * a turn comes right after run.resumed): its state, and its error when it did not complete.
   */
  "child.finished": z.looseObject({
    job_id: z.string(),
    call_id: z.string(),
    state: z.string(),
    error: eventJobError.nullable(),
  }),
  /** `truncated`: the answer was bigger than an event may hold; `output` is its start (capEventPayload). */
  "run.completed": z.union([z.looseObject({ output: z.string().nullable(), ...truncationFields }), projected]),
  "run.failed": z.union([z.looseObject({ error: eventJobError }), projected]),
  /** The partial text, or null. */
  "run.cancelled": z.union([z.looseObject({ output: z.string().nullable() }), projected]),
  "run.lost": projected,
  "run.timed_out": projected,
  "run.expired": projected,
} as const satisfies Record<EventType, z.ZodType<Record<string, unknown>>>;

export type EventPayload<T extends EventType> = z.infer<(typeof EVENT_PAYLOAD_SCHEMAS)[T]>;

/**
 * The most one event's payload may hold, as UTF-8 JSON. The event path's narrowest point is the
 * ingest request (1 MiB at the gateway, 512 KiB per request at the host's outbox): a 1 MiB
 * `read_file` result (1.33 MiB of base64) could not be in any request, ingest refused its batch
 * for good and the outbox dropped every later event of the run. 256 KiB leaves two such events
 * per request and four in the projector's 1 MiB gap buffer. The model still gets the whole result.
 */
export const MAX_EVENT_PAYLOAD_BYTES = 256 * 1024;

/** What a truncated payload says about itself, next to its own fields. */
export interface TruncationMark {
  truncated: true;
  /** The payload's size before truncation, UTF-8 JSON bytes. */
  original_bytes: number;
}

/** Strings shorter than this are never cut (see capEventPayload). */
const MIN_CUT_LENGTH = 1024;

/**
 * A payload cut to fit MAX_EVENT_PAYLOAD_BYTES, its JSON size, and its size before the cut (null:
 * not cut). One that fits comes back as is. Otherwise its longest strings are cut (never inside a surrogate pair), longest first, and
 * when strings alone cannot make it fit (many small ones) its largest fields become null; the
 * payload then carries `truncated: true` and `original_bytes`. Only an emitter of big free-form
 * values (a tool's output or arguments, a long delta) ever hits this; identifying fields (ids,
 * names, codes) are far shorter than what is cut first.
 */
export function capEventPayload<P extends Record<string, unknown>>(
  payload: P,
  max = MAX_EVENT_PAYLOAD_BYTES,
): { payload: P; bytes: number; truncatedFrom: number | null } {
  const originalBytes = utf8Bytes(JSON.stringify(payload));
  if (originalBytes <= max) return { payload, bytes: originalBytes, truncatedFrom: null };
  // The mark's own bytes, with room for a number of any size.
  const budget = max - 64;
  const copy = structuredClone(payload) as Record<string, unknown>;
  const strings: Array<{ holder: Record<string, unknown> | unknown[]; key: string | number; length: number }> = [];
  const stack: unknown[] = [copy];
  for (let v = stack.pop(); v !== undefined; v = stack.pop()) {
    if (v === null || typeof v !== "object") continue;
    for (const [k, child] of Object.entries(v)) {
      const key = Array.isArray(v) ? Number(k) : k;
      if (typeof child === "string") strings.push({ holder: v as Record<string, unknown>, key, length: child.length });
      else stack.push(child);
    }
  }
  strings.sort((a, b) => b.length - a.length);
  let bytes = originalBytes;
  for (const s of strings) {
    // Short strings are not worth it (ids, names, a list's entries): their fields go below.
    if (bytes <= budget || s.length < MIN_CUT_LENGTH) break;
    const holder = s.holder as Record<string | number, string>;
    const text = holder[s.key] as string;
    // Each character is at least one byte of JSON: cutting the overshoot's worth always gets there.
    let keep = Math.max(0, text.length - (bytes - budget));
    if (keep > 0 && /[\uD800-\uDBFF]/.test(text[keep - 1] ?? "")) keep--;
    const cut = text.slice(0, keep);
    bytes -= utf8Bytes(JSON.stringify(text)) - utf8Bytes(JSON.stringify(cut));
    holder[s.key] = cut;
  }
  const fields = Object.keys(copy).sort(
    (a, b) => utf8Bytes(JSON.stringify(copy[b]) ?? "") - utf8Bytes(JSON.stringify(copy[a]) ?? ""),
  );
  for (const field of fields) {
    if (bytes <= budget) break;
    copy[field] = null;
    bytes = utf8Bytes(JSON.stringify(copy));
  }
  const mark: TruncationMark = { truncated: true, original_bytes: originalBytes };
  const capped = { ...copy, ...mark } as unknown as P;
  return { payload: capped, bytes: utf8Bytes(JSON.stringify(capped)), truncatedFrom: originalBytes };
}

const envelopeFields = {
  job_id: z.string().min(1).max(100),
  execution_id: z.string().min(1).max(100),
  epoch: z.number().int().min(0),
  seq: z.number().int().min(1),
  ts: z.string(),
};

function envelopeOf<T extends EventType>(type: T) {
  return z.object({ ...envelopeFields, type: z.literal(type), payload: EVENT_PAYLOAD_SCHEMAS[type] });
}

/** The envelope, discriminated by `type`: each type carries its own payload. */
export const EventEnvelopeSchema = z.discriminatedUnion("type", [
  envelopeOf("run.started"),
  envelopeOf("run.prepared"),
  envelopeOf("quota.waiting"),
  envelopeOf("model.turn"),
  envelopeOf("model.delta"),
  envelopeOf("model.retry"),
  envelopeOf("tool.call"),
  envelopeOf("tool.result"),
  envelopeOf("tool.approval_requested"),
  envelopeOf("input.requested"),
  envelopeOf("budget.exhausted"),
  envelopeOf("run.suspended"),
  envelopeOf("run.resumed"),
  envelopeOf("run.recovered"),
  envelopeOf("run.forked"),
  envelopeOf("sandbox.waiting"),
  envelopeOf("sandbox.created"),
  envelopeOf("input.accepted"),
  envelopeOf("cancel.accepted"),
  envelopeOf("child.created"),
  envelopeOf("child.finished"),
  envelopeOf("run.completed"),
  envelopeOf("run.failed"),
  envelopeOf("run.cancelled"),
  envelopeOf("run.lost"),
  envelopeOf("run.timed_out"),
  envelopeOf("run.expired"),
]);
export type EventEnvelope = z.infer<typeof EventEnvelopeSchema>;
/** The envelope of one event type. */
export type EventOf<T extends EventType> = Extract<EventEnvelope, { type: T }>;

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
