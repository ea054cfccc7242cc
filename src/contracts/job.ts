/** Job-facing contracts: request bodies, the public Job view and the job states. */
import { z } from "zod";
import { ADMISSION_LIMITS } from "./admission";
import { agentRefSchema, JobLimitsSchema } from "./agent";
import { JOB_ERROR_CODES, type JobErrorCode } from "./errors";
import { JOB_STATES } from "./job-state";
import { refineStorableJson, text, whenValid } from "./text";
import { TOOL_NAMES } from "./tools";
import { WaitingForSchema } from "./wait";

export { JOB_STATES, type JobState } from "./job-state";
export { TOOL_NAMES, type ToolName } from "./tools";

/** Limits that keep one job row and one event bounded; the gateway also caps the raw body. */
export const LIMITS = {
  maxBodyBytes: 256 * 1024,
  maxMessages: 200,
  maxMessageChars: 64 * 1024,
  maxIdempotencyKey: 200,
  maxConversationId: 200,
  maxMetadataBytes: 16 * 1024,
  maxListLimit: 100,
  defaultListLimit: 20,
  /**
   * Inputs one job accepts over its life (POST /v1/jobs/:id/input), by count and by total UTF-8
   * bytes of their content: each is stored and replayed into the model context, so without a
   * cap one job could grow its rows and its prompt without bound.
   */
  maxInputsPerJob: 100,
  maxInputBytesPerJob: 256 * 1024,
  /** Jobs one POST /v1/jobs/batch may carry. */
  maxBatchJobs: 100,
  /**
   * A batch's body cap (MAX_BODY_BYTES when that is larger); each item must still fit
   * MAX_BODY_BYTES on its own. 1 MiB is what a worker reads and parses in a few ms; 100 items at
   * the single cap (25 MiB) would not be, and a batch that large is better sent as several.
   */
  maxBatchBodyBytes: 1024 * 1024,
} as const;

/**
 * Idempotency keys beginning with this are the gateway's own (a chat message's job, see
 * chatIdempotencyKey); a client's key may not, so the two can never name the same job.
 */
export const RESERVED_IDEMPOTENCY_PREFIX = "chat:";

/**
 * The idempotency keys of an eval's judge jobs begin with this (`evalJudgeKey`, src/contracts/eval.ts):
 * the key is what makes a judge job made once per case and scorer however many scoring passes
 * (or hosts) try, so a client's key may not begin with it either.
 */
export const EVAL_JUDGE_KEY_PREFIX = "eval:";

export const idempotencyKey = text()
  .min(1)
  .max(LIMITS.maxIdempotencyKey)
  .refine((k) => !k.startsWith(RESERVED_IDEMPOTENCY_PREFIX), {
    message: `must not start with "${RESERVED_IDEMPOTENCY_PREFIX}" (reserved for chat messages)`,
  })
  .refine((k) => !k.startsWith(EVAL_JUDGE_KEY_PREFIX), {
    message: `must not start with "${EVAL_JUDGE_KEY_PREFIX}" (reserved for evals' judge jobs)`,
  });

export const ChatMessageSchema = z.object({
  role: z.enum(["system", "user", "assistant"]),
  content: text().max(LIMITS.maxMessageChars),
});
export type ChatMessage = z.infer<typeof ChatMessageSchema>;

export const JobInputSchema = z.object({
  messages: z.array(ChatMessageSchema).min(1).max(LIMITS.maxMessages),
});

const idLike = (max: number) =>
  text()
    .min(1)
    .max(max)
    .regex(/^[A-Za-z0-9._:-]+$/, "may contain only letters, digits and . _ : -");

/**
 * A conversation id, the client's own. `.` and `..` are refused: a URL path normalizes them away
 * (`/v1/conversations/../messages` is `/v1/messages`), so such a conversation could be written
 * but never read, streamed or bound to a token. The one home of the rule: POST /v1/jobs,
 * POST /v1/tokens and the /v1/conversations/{id} routes all use it.
 */
export const conversationIdSchema = idLike(LIMITS.maxConversationId).regex(
  /^(?!\.\.?$)/,
  "must not be . or .. (a URL path cannot name them)",
);

export const CreateJobBodySchema = z
  .object({
    input: JobInputSchema,
    conversation_id: conversationIdSchema.optional(),
    /**
     * The agent to run: `name` (its latest version at submit) or `name@N`. It fixes the model
     * and the tools, so a body naming an agent may not give `model` or `tools` too.
     */
    agent: agentRefSchema.optional(),
    model: text().min(1).max(200).optional(),
    tools: z.array(z.enum(TOOL_NAMES)).max(TOOL_NAMES.length).optional(),
    idempotency_key: idempotencyKey.optional(),
    metadata: z
      .record(text(), z.unknown())
      .superRefine(refineStorableJson)
      .optional()
      .refine((m) => m === undefined || JSON.stringify(m).length <= LIMITS.maxMetadataBytes, {
        message: `metadata must serialize to at most ${LIMITS.maxMetadataBytes} bytes`,
        ...whenValid,
      }),
    /** Higher runs first among this tenant's runnable jobs (default 0, or the agent's). */
    priority: z.number().int().min(ADMISSION_LIMITS.minPriority).max(ADMISSION_LIMITS.maxPriority).optional(),
    /** Not claimable for this many seconds after the submit (`queued` meanwhile). */
    delay_s: z.number().int().min(0).max(ADMISSION_LIMITS.maxDelayS).optional(),
    /** Not claimable before this instant (RFC 3339 with an offset); not together with delay_s. */
    run_at: z.iso.datetime({ offset: true }).optional(),
    /** Ends `expired` (never started) when not started within this many seconds of becoming runnable. */
    ttl_s: z.number().int().min(ADMISSION_LIMITS.minTtlS).max(ADMISSION_LIMITS.maxTtlS).optional(),
    /** This tenant's jobs sharing a key run one at a time. */
    concurrency_key: text().min(1).max(ADMISSION_LIMITS.maxConcurrencyKey).optional(),
    /** This job's own budget limits, each at most its agent's (docs/quota.md, "A tree's budget"). */
    limits: JobLimitsSchema.optional(),
  })
  .strict()
  .refine((b) => b.delay_s === undefined || b.run_at === undefined, {
    message: "give delay_s or run_at, not both",
    path: ["run_at"],
    ...whenValid,
  })
  .refine((b) => b.run_at === undefined || Date.parse(b.run_at) - Date.now() <= ADMISSION_LIMITS.maxDelayS * 1000, {
    message: `must be at most ${ADMISSION_LIMITS.maxDelayS} s (a year) ahead, like delay_s`,
    path: ["run_at"],
    ...whenValid,
  });
export type CreateJobBody = z.infer<typeof CreateJobBodySchema>;

/** POST /v1/jobs/batch: up to LIMITS.maxBatchJobs submit bodies, created in order or not at all. */
export const CreateJobBatchBodySchema = z
  .object({ jobs: z.array(CreateJobBodySchema).min(1).max(LIMITS.maxBatchJobs) })
  .strict();

/**
 * The batch as read before its items: the envelope, so that an item's failure is reported as
 * `jobs[3].input: …` by the item check (workers/commands/submit.ts), which applies
 * CreateJobBodySchema to each. The two together accept exactly CreateJobBatchBodySchema.
 */
export const JobBatchEnvelopeSchema = z.object({ jobs: z.array(z.unknown()).min(1).max(LIMITS.maxBatchJobs) }).strict();

export const ListJobsQuerySchema = z.object({
  state: z.enum(JOB_STATES).optional(),
  /** Only the jobs this schedule's ticks made. */
  schedule_id: z.uuid().optional(),
  limit: z.coerce.number().int().min(1).max(LIMITS.maxListLimit).default(LIMITS.defaultListLimit),
  cursor: text().max(200).optional(),
});

/** GET /v1/jobs/:id's query: `include=input` adds the job's submitted `input` to its view. */
export const GetJobQuerySchema = z.object({ include: z.enum(["input"]).optional() });

export const JobErrorSchema = z.object({ code: z.enum(JOB_ERROR_CODES), message: z.string() });
export type JobError = z.infer<typeof JobErrorSchema>;

/**
 * Failure codes whose message is the system's own detail (an exception's text, the container
 * engine's output, a socket error naming an internal address), with the message a tenant sees
 * instead. The code stays, so a client can still tell the failures apart; the detail stays in
 * the host's log next to the job id. Every other code's message is written for the tenant.
 */
export const INTERNAL_JOB_ERRORS: Readonly<Partial<Record<JobErrorCode, string>>> = {
  internal_error: "the job failed because of an internal error",
  sandbox_error: "the sandbox the job's tools run in failed",
  network_error: "the model provider could not be reached",
};

/** The error as a tenant may see it: internal detail replaced by the code's generic message. */
export function tenantJobError(error: JobError): JobError {
  const generic = Object.hasOwn(INTERNAL_JOB_ERRORS, error.code) ? INTERNAL_JOB_ERRORS[error.code] : undefined;
  return generic === undefined ? error : { code: error.code, message: generic };
}

const latencyMs = z.number().int().min(0).nullable();
export const LatencyViewSchema = z.object({
  dispatch_latency_ms: latencyMs,
  preparation_latency_ms: latencyMs,
  model_first_output_latency_ms: latencyMs,
  first_output_latency_ms: latencyMs,
  total_latency_ms: latencyMs,
});
export type LatencyView = z.infer<typeof LatencyViewSchema>;

const isoTime = z.iso.datetime();

/** Tokens the job's model calls used, summed (each call is also counted in GET /v1/usage). */
export const JobUsageSchema = z.object({
  prompt_tokens: z.number().int().min(0),
  completion_tokens: z.number().int().min(0),
  model_calls: z.number().int().min(0),
  /** Some call's tokens were estimated because its provider reported none. */
  estimated: z.boolean(),
  /** US dollars at the registry's `pricing` when each call was made; null: no call was priced. */
  cost_usd: z.number().min(0).nullable(),
  /**
   * US dollars its calls reserved before they were made (each call's worst case, against its
   * cost budgets), summed over the calls counted above; 0 when no budget applied (docs/quota.md).
   */
  reserved_usd: z.number().min(0),
});

/** The public Job every job route and chat `job` frame returns (built by src/db/job-view.ts). */
export const JobViewSchema = z.object({
  id: z.uuid(),
  conversation_id: z.string().nullable(),
  state: z.enum(JOB_STATES),
  claimed: z.boolean(),
  epoch: z.number().int().min(0),
  execution_id: z.uuid().nullable(),
  output: z.string().nullable(),
  error: JobErrorSchema.nullable(),
  created_at: isoTime,
  started_at: isoTime.nullable(),
  prepared_at: isoTime.nullable(),
  first_output_at: isoTime.nullable(),
  finished_at: isoTime.nullable(),
  latency: LatencyViewSchema,
  model: z.string().nullable(),
  /** The sandbox tools, and the agent's code tools (HOST_TOOLS). */
  tools: z.array(z.string()),
  metadata: z.record(z.string(), z.unknown()),
  /** The agent version the job runs (resolved at submit), or null for the built-in default agent. */
  agent: z.object({ name: z.string(), version: z.number().int().min(1) }).nullable(),
  usage: JobUsageSchema,
  /** The job's own budget `limits` as submitted (each at most its agent's); null: its agent's apply. */
  limits: JobLimitsSchema.nullable(),
  /** US dollars approvals of `budget.exhausted` waits added to this job's (as a tree's root) max_cost_usd. */
  budget_added_usd: z.number().min(0),
  /** The answer parsed as JSON when the agent has a `response_format` (validated against it), else null. */
  output_json: z.unknown().nullable(),
  /** What a `waiting` job waits for (an approval of a tool call, or an answer to ask_user); null in every other state. */
  waiting_for: WaitingForSchema.nullable(),
  /** The job whose delegate call created this one (a sub-agent's child job), else null. */
  parent_job_id: z.uuid().nullable(),
  /** The top of this job's delegation tree (null for a job nobody delegated: it is its own root). */
  root_job_id: z.uuid().nullable(),
  /** How deep in its tree: 0 for a submitted job, 1 for its children, … */
  depth: z.number().int().min(0),
  /** How many times the job continued in a new execution after its host was lost or handed it off (`run.recovered`). */
  recoveries: z.number().int().min(0),
  /**
   * The OpenTelemetry trace the run's spans are in (hosts with tracing on): the delegating call's
   * for a child job, the submit's traceparent's only when the operator trusts clients' trace
   * context (OTEL_TRUST_CLIENT_SAMPLING), else the job id's 32 hex digits (docs/observability.md, "Traces").
   */
  trace_id: z.string().regex(/^[0-9a-f]{32}$/),
  /** The schedule whose tick made the job (GET /v1/schedules/{id}), else null. */
  schedule_id: z.uuid().nullable(),
  /** That tick's time (the job was due then); null for a job no schedule made. */
  scheduled_for: isoTime.nullable(),
  /** Its order among its tenant's runnable jobs (higher first). */
  priority: z.number().int(),
  /** Not claimable before this instant (delay_s / run_at), else null. */
  run_at: isoTime.nullable(),
  /** Ends `expired` if not started by then (ttl_s), else null. */
  expires_at: isoTime.nullable(),
  concurrency_key: z.string().nullable(),
  /**
   * The job and journal step this job was forked from (POST /v1/jobs/{id}/fork or …/rerun): its
   * first execution continued from that job's steps 1..`step`; null for a job that is no fork.
   */
  forked_from: z.object({ job_id: z.uuid(), step: z.number().int().min(0) }).nullable(),
  /**
   * The messages the job was submitted with (a chat message's job: its conversation's history
   * then the message). Only on `GET /v1/jobs/{id}?include=input`: an input can be as large as
   * LIMITS.maxMessages messages, which no list, stream frame or submit answer should carry.
   */
  input: JobInputSchema.optional(),
});
export type JobView = z.infer<typeof JobViewSchema>;

/** The answer of POST /v1/jobs and GET /v1/jobs/:id. */
export const JobAnswerSchema = z.object({ job: JobViewSchema });
/** POST /v1/jobs/batch: the jobs in the order the batch gave them. */
export const JobBatchAnswerSchema = z.object({ jobs: z.array(JobViewSchema) });

/** A page of GET /v1/jobs; `next_cursor` is null on the last page. */
export const JobPageSchema = z.object({ jobs: z.array(JobViewSchema), next_cursor: z.string().nullable() });

/** What a cancel did: the job was cancelled here, its owner was asked to stop, or it had already ended. */
export const CANCEL_OUTCOMES = ["cancelled", "requested", "already_finished"] as const;
export type CancelOutcome = (typeof CANCEL_OUTCOMES)[number];
export const CancelAnswerSchema = z.object({ status: z.enum(CANCEL_OUTCOMES) });

/** An input's life: requested → accepted (its owner took it) → applied; already_finished if the job ended first. */
export const INPUT_STATUSES = ["requested", "accepted", "applied", "already_finished"] as const;
export type InputStatus = (typeof INPUT_STATUSES)[number];
export const InputAnswerSchema = z.object({ input_id: z.uuid(), status: z.enum(INPUT_STATUSES) });

export const InputViewSchema = z.object({
  input_id: z.uuid(),
  status: z.enum(INPUT_STATUSES),
  content: z.string(),
  created_at: isoTime,
  accepted_at: isoTime.nullable(),
  applied_at: isoTime.nullable(),
});
export const InputListSchema = z.object({ inputs: z.array(InputViewSchema) });

export const JobInputBodySchema = z
  .object({
    content: text().min(1).max(LIMITS.maxMessageChars),
    // Scoped to one job: no chat keys live there, so the reserved prefix does not apply.
    idempotency_key: text().min(1).max(LIMITS.maxIdempotencyKey).optional(),
  })
  .strict();
