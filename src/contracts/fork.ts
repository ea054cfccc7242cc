/**
 * A job's steps (its journal as a recovery reads it) and the routes that start a new job from
 * them: fork (from a step, optionally with another agent, more messages or a replaced tool
 * result) and rerun (the original input from step 0). docs/api.md, "Steps, forks and reruns";
 * how a fork reads its prefix: docs/architecture.md, "Forks".
 */
import { z } from "zod";
import { agentRefSchema } from "./agent";
import { ChatMessageSchema, idempotencyKey, LIMITS } from "./job";
import { JOB_STATES } from "./job-state";
import { text } from "./text";

/**
 * `recovery_reason` of a fork's row: its first execution starts from the journal it was created
 * with (the copied prefix), as a recovery does (sandbox-host/runner/recovery.ts), and says `run.forked`.
 */
export const FORK_REASON = "forked";

/** The journal's kinds as GET /v1/jobs/{id}/steps shows them (src/db/schema.ts JOURNAL_KINDS). */
export const STEP_KINDS = ["turn", "call", "result", "user", "recovered", "snapshot"] as const;

/** How many characters of a step's text its `summary` shows. */
export const STEP_SUMMARY_CHARS = 200;

export const StepViewSchema = z.object({
  /** The journal row's number: the same number `run.recovered.from_step` and `forked_from.step` use. */
  step: z.number().int().min(1),
  kind: z.enum(STEP_KINDS),
  at: z.iso.datetime(),
  /** The step in a line (text cut to STEP_SUMMARY_CHARS characters). */
  summary: z.string(),
  /** The tool call a `call` or `result` step belongs to. */
  call_id: z.string().optional(),
  /** The tool a `call` step names (a `result` step's too, when its call is journaled). */
  tool: z.string().optional(),
  /**
   * The execution that journaled the step; null for the steps a fork took over from its source
   * (they are the source's: GET /v1/jobs/{forked_from.job_id}/steps names their executions).
   */
  execution_id: z.uuid().nullable(),
});
export type StepView = z.infer<typeof StepViewSchema>;

export const ListStepsQuerySchema = z.object({
  /** Steps after this one (0: from the first). */
  after: z.coerce.number().int().min(0).default(0),
  limit: z.coerce.number().int().min(1).max(LIMITS.maxListLimit).default(LIMITS.defaultListLimit),
});

/** A page of steps in journal order; `next_after` is null on the last page. */
export const StepPageSchema = z.object({
  steps: z.array(StepViewSchema),
  next_after: z.number().int().min(1).nullable(),
});

export const ForkBodySchema = z
  .object({
    /** Continue after this step (0: from the input alone); default: every step journaled so far. */
    from_step: z.number().int().min(0).optional(),
    /** Another version of the job's agent, or another agent of the tenant (`name` or `name@N`). */
    agent: agentRefSchema.optional(),
    /** User messages added after the prefix, before the fork's first model turn. */
    append_messages: z
      .array(ChatMessageSchema.extend({ role: z.literal("user") }))
      .min(1)
      .max(LIMITS.maxMessages)
      .optional(),
    /** The result a tool call of the prefix has in the fork (its call is not made). */
    replace_result: z
      .object({
        call_id: text().min(1).max(200),
        /** What the model reads as the call's result: a string as is, any other JSON value serialized. */
        // Not z.json(): its recursive schema has no name in the OpenAPI document's components.
        result: z
          .unknown()
          .refine((v) => v !== undefined, { message: "required" })
          .refine((v) => (typeof v === "string" ? v : (JSON.stringify(v) ?? "")).length <= LIMITS.maxMessageChars, {
            message: `must be at most ${LIMITS.maxMessageChars} characters (serialized)`,
          }),
      })
      .strict()
      .optional(),
    idempotency_key: idempotencyKey.optional(),
  })
  .strict();
export type ForkBody = z.infer<typeof ForkBodySchema>;

export const RerunBodySchema = z
  .object({
    agent: agentRefSchema.optional(),
    idempotency_key: idempotencyKey.optional(),
  })
  .strict();
export type RerunBody = z.infer<typeof RerunBodySchema>;

/** The most jobs one replay reruns. */
export const MAX_REPLAY_JOBS = 1000;

/** Which of the tenant's jobs a replay reruns: newest first, at most `limit`. */
export const ReplayFilterSchema = z
  .object({
    /** Jobs of this agent (`name`: any version, `name@N`: that version). */
    agent: agentRefSchema.optional(),
    state: z.enum(JOB_STATES).optional(),
    /** Created at or after this instant. */
    since: z.iso.datetime({ offset: true }).optional(),
    /** Created before this instant. */
    until: z.iso.datetime({ offset: true }).optional(),
    limit: z.number().int().min(1).max(MAX_REPLAY_JOBS).default(100),
  })
  .strict();

export const CreateReplayBodySchema = z
  .object({
    filter: ReplayFilterSchema,
    /** The agent to rerun them with (`name` or `name@N`); default: each job's own version. */
    agent: agentRefSchema.optional(),
  })
  .strict();
export type CreateReplayBody = z.infer<typeof CreateReplayBodySchema>;

export const ReplayCreatedSchema = z.object({
  replay: z.object({ id: z.uuid(), jobs_total: z.number().int().min(0) }),
});

export const ReplayViewSchema = z.object({
  id: z.uuid(),
  filter: z.record(z.string(), z.unknown()),
  agent: z.string().nullable(),
  created_at: z.iso.datetime(),
  jobs_total: z.number().int().min(0),
  /** How many of its jobs are in each state (states with none are left out). */
  progress: z.partialRecord(z.enum(JOB_STATES), z.number().int().min(1)),
  /** Its jobs ended (a final state), of `jobs_total`. */
  finished: z.number().int().min(0),
  /** Each new job with the job it reruns, in the order the replay selected them (newest source first). */
  jobs: z.array(z.object({ source_job_id: z.uuid(), job_id: z.uuid(), state: z.enum(JOB_STATES) })),
});
export const ReplayAnswerSchema = z.object({ replay: ReplayViewSchema });
