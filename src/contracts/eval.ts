/**
 * Evals (docs/api.md, "Evals"): an agent version run over a set of cases as jobs, each case's
 * answer scored by the scorers the eval names, and two evals paired case by case. Where and when
 * a case is scored: docs/architecture.md, "Evals".
 */
import { z } from "zod";
import { agentRefSchema } from "./agent";
import { ReplayFilterSchema } from "./fork";
import { EVAL_JUDGE_KEY_PREFIX, JobInputSchema, LIMITS } from "./job";
import { JOB_STATES } from "./job-state";
import { refineStorableJson, text } from "./text";

/** The most cases one eval runs (as many as a replay reruns). */
export const MAX_EVAL_CASES = 1000;
/** The most scorers one eval applies to each case. */
export const MAX_EVAL_SCORERS = 10;
/** A regex scorer's pattern length bound (the time bound of its match is the host's, ScoreCase). */
export const MAX_SCORER_PATTERN_CHARS = 1000;
/** A json_schema scorer's schema, serialized (an agent's response_format has the same bound). */
export const MAX_SCORER_SCHEMA_BYTES = 64 * 1024;
/** A judge's score at or above this passes, unless the scorer gives its own `threshold`. */
export const DEFAULT_JUDGE_THRESHOLD = 0.5;

export const SCORER_TYPES = ["equals", "contains", "regex", "json_schema", "judge"] as const;
export type ScorerType = (typeof SCORER_TYPES)[number];

/** A scorer's name in the scores (default: its type); unique within an eval. */
const scorerName = text()
  .min(1)
  .max(64)
  .regex(/^[A-Za-z0-9_.-]+$/, "letters, digits, '_', '.' and '-' only");

const expectText = text().max(LIMITS.maxMessageChars);

export const ScorerSchema = z.discriminatedUnion("type", [
  z
    .object({
      type: z.literal("equals"),
      name: scorerName.optional(),
      /** The answer to compare with (trimmed, exactly); default: the case's `expect`. */
      value: expectText.optional(),
    })
    .strict(),
  z
    .object({
      type: z.literal("contains"),
      name: scorerName.optional(),
      /** The text the answer must contain; default: the case's `expect`. */
      value: expectText.optional(),
    })
    .strict(),
  z
    .object({
      type: z.literal("regex"),
      name: scorerName.optional(),
      /** A JavaScript regular expression the answer must match (searched, not anchored). */
      pattern: text().min(1).max(MAX_SCORER_PATTERN_CHARS),
      flags: z
        .string()
        .regex(/^(?!.*(.).*\1)[imsuv]*$/, "at most one each of i, m, s, u, v")
        .optional(),
    })
    .strict(),
  z
    .object({
      type: z.literal("json_schema"),
      name: scorerName.optional(),
      /** A draft 2020-12 JSON Schema the answer, parsed as JSON, must satisfy. */
      schema: z.record(text(), z.unknown()).superRefine(refineStorableJson),
    })
    .strict(),
  z
    .object({
      type: z.literal("judge"),
      name: scorerName.optional(),
      /**
       * An agent of the tenant (`name` or `name@N`) that is given the case and the answer and
       * replies `{"score": 0..1, "reason": "…"}`; it runs as a job of the tenant.
       */
      agent: agentRefSchema,
      /** The score at or above which the case passes this scorer (default 0.5). */
      threshold: z.number().min(0).max(1).optional(),
    })
    .strict(),
]);
export type Scorer = z.infer<typeof ScorerSchema>;

/** The name a scorer's scores go under. */
export function scorerNameOf(s: Scorer): string {
  return s.name ?? s.type;
}

export const EvalCaseInputSchema = z
  .object({
    input: JobInputSchema,
    /** What the answer should be: `equals` and `contains` compare with it, a judge is shown it. */
    expect: expectText.optional(),
  })
  .strict();

export const CreateEvalBodySchema = z
  .object({
    /** The agent version the cases run with (`name`: its latest version now, `name@N`). */
    agent: agentRefSchema,
    /** The cases: each an input and optionally what its answer should be. */
    cases: z.array(EvalCaseInputSchema).min(1).max(MAX_EVAL_CASES).optional(),
    /**
     * Instead of `cases`: the inputs of the jobs a replay reran (its id) or a replay filter
     * selects, each case expecting its source job's answer (none when the source has none).
     */
    replay_of: z.union([z.uuid(), ReplayFilterSchema]).optional(),
    scorers: z.array(ScorerSchema).min(1).max(MAX_EVAL_SCORERS),
  })
  .strict()
  .superRefine((b, ctx) => {
    if ((b.cases === undefined) === (b.replay_of === undefined)) {
      ctx.addIssue({ code: "custom", path: ["cases"], message: "give exactly one of cases and replay_of" });
    }
    const seen = new Set<string>();
    b.scorers.forEach((s, i) => {
      const name = scorerNameOf(s);
      if (seen.has(name)) {
        ctx.addIssue({
          code: "custom",
          path: ["scorers", i, "name"],
          message: `two scorers are named "${name}": give each its own name`,
        });
      }
      seen.add(name);
      if (s.type === "json_schema" && JSON.stringify(s.schema).length > MAX_SCORER_SCHEMA_BYTES) {
        ctx.addIssue({
          code: "custom",
          path: ["scorers", i, "schema"],
          message: `must serialize to at most ${MAX_SCORER_SCHEMA_BYTES} bytes`,
        });
      }
    });
  });
export type CreateEvalBody = z.infer<typeof CreateEvalBodySchema>;

export const EvalCreatedSchema = z.object({
  eval: z.object({ id: z.uuid(), cases_total: z.number().int().min(0) }),
});

/** One scorer's verdict on one case. */
export const ScoreViewSchema = z.object({
  scorer: z.string(),
  type: z.enum(SCORER_TYPES),
  /** 0..1 (1 or 0 for every scorer but a judge); null: the scorer could not score (`reason` says why). */
  score: z.number().min(0).max(1).nullable(),
  /** Whether the score passes (1 for the exact scorers, ≥ threshold for a judge); null with `score`. */
  pass: z.boolean().nullable(),
  reason: z.string().nullable(),
  /** A judge's job (GET /v1/jobs/{id} shows what it was given and answered). */
  judge_job_id: z.uuid().optional(),
});
export type ScoreView = z.infer<typeof ScoreViewSchema>;

export const EvalCaseViewSchema = z.object({
  /** The case's place in the eval (0-based), the key compare pairs on. */
  index: z.number().int().min(0),
  input: JobInputSchema,
  expect: z.string().nullable(),
  /** The job whose input the case took (replay_of), else null. */
  source_job_id: z.uuid().nullable(),
  /** The job that ran the case. */
  job_id: z.uuid(),
  /** Its state; null when the job is gone (purged by retention). */
  state: z.enum(JOB_STATES).nullable(),
  output: z.string().nullable(),
  /** Each scorer's verdict once the case is scored; null before. */
  scores: z.array(ScoreViewSchema).nullable(),
  /** The mean of the scores that scored (null: none did, or not scored yet). */
  score: z.number().min(0).max(1).nullable(),
  /** Every scorer that scored passed (and at least one did); null: not scored yet. */
  pass: z.boolean().nullable(),
  cost_usd: z.number().nullable(),
  /** The job's total latency (submit to its end, queue wait included). */
  latency_ms: z.number().int().min(0).nullable(),
  scored_at: z.iso.datetime().nullable(),
});
export type EvalCaseView = z.infer<typeof EvalCaseViewSchema>;

export const EvalSummarySchema = z.object({
  cases_total: z.number().int().min(0),
  /** Cases whose job ended. */
  finished: z.number().int().min(0),
  scored: z.number().int().min(0),
  passed: z.number().int().min(0),
  /** passed / scored; null while none is scored. */
  pass_rate: z.number().min(0).max(1).nullable(),
  /** The mean of the scored cases' `score`. */
  mean_score: z.number().min(0).max(1).nullable(),
  /** The cases' jobs' cost summed (judges' jobs not included: they are jobs of their own). */
  cost_usd: z.number(),
  latency_p50_ms: z.number().int().min(0).nullable(),
  latency_p95_ms: z.number().int().min(0).nullable(),
});
export type EvalSummary = z.infer<typeof EvalSummarySchema>;

const evalHead = {
  id: z.uuid(),
  /** The agent as the request named it. */
  agent: z.string(),
  /** The version the cases run with (resolved when the eval was made). */
  agent_version: z.object({ name: z.string(), version: z.number().int().min(1) }),
  created_at: z.iso.datetime(),
  cases_total: z.number().int().min(0),
};

export const EvalViewSchema = z.object({
  ...evalHead,
  scorers: z.array(z.record(z.string(), z.unknown())),
  replay_of: z.union([z.string(), z.record(z.string(), z.unknown())]).nullable(),
  summary: EvalSummarySchema,
  cases: z.array(EvalCaseViewSchema),
});
export type EvalView = z.infer<typeof EvalViewSchema>;
export const EvalAnswerSchema = z.object({ eval: EvalViewSchema });

export const ListEvalsQuerySchema = z.object({
  limit: z.coerce.number().int().min(1).max(LIMITS.maxListLimit).default(LIMITS.defaultListLimit),
  cursor: text().max(200).optional(),
});
export const EvalListItemSchema = z.object({ ...evalHead, summary: EvalSummarySchema });
export type EvalListItem = z.infer<typeof EvalListItemSchema>;
/** A page of the tenant's evals, newest first; `next_cursor` is null on the last page. */
export const EvalPageSchema = z.object({ evals: z.array(EvalListItemSchema), next_cursor: z.string().nullable() });

export const EvalPairSchema = z.object({
  index: z.number().int().min(0),
  /** Both cases have the same input (and expectation). */
  same_case: z.boolean(),
  a: EvalCaseViewSchema.nullable(),
  b: EvalCaseViewSchema.nullable(),
  /** b's score minus a's, when both scored. */
  score_delta: z.number().min(-1).max(1).nullable(),
});
export const EvalCompareSchema = z.object({
  a: EvalListItemSchema,
  b: EvalListItemSchema,
  /** The cases paired by `index` (a case only one eval has is paired with null). */
  pairs: z.array(EvalPairSchema),
});
export type EvalCompare = z.infer<typeof EvalCompareSchema>;

/** A judge job's idempotency key: one judge job per case and scorer, however many passes try. */
export function evalJudgeKey(evalId: string, index: number, scorer: string): string {
  return `${EVAL_JUDGE_KEY_PREFIX}${evalId}:${index}:${scorer}`;
}
