/**
 * The waitpoint's contracts: what a `waiting` job waits for (the Job view's `waiting_for`), the
 * decision body of POST /v1/jobs/{id}/approvals/{call_id} and its answer.
 */
import { z } from "zod";
import { text } from "./text";

/**
 * `approval`: a gated tool call waits for approve/deny; `input`: ask_user waits for POST …/input;
 * `children`: the turn's delegate calls wait for the child jobs they created to end; `budget`:
 * a model call its tree's max_cost_usd refused waits for approve (with `add_usd`) or deny
 * (`limits.on_budget: "ask"`, docs/quota.md).
 */
export const WAIT_KINDS = ["approval", "input", "children", "budget"] as const;
export type WaitKind = (typeof WAIT_KINDS)[number];

/** How a wait ended: the two approval decisions, the user's answer to ask_user, or every child ended. */
export const WAIT_DECISIONS = ["approve", "deny", "input", "children"] as const;
export type WaitDecision = (typeof WAIT_DECISIONS)[number];

/** The longest note a decision may carry (it becomes the tool result the model reads). */
export const MAX_DECISION_NOTE_CHARS = 4096;

/** The most one approval of a `budget` wait may add (US dollars), a sanity bound on a typo. */
export const MAX_ADD_USD = 1_000_000;

/** What a `waiting` job waits for (null in every other state). */
export const WaitingForSchema = z.object({
  kind: z.enum(WAIT_KINDS),
  call_id: z.string(),
  /** The tool called (`ask_user` for a question; the model's name for a `budget` wait). */
  tool: z.string(),
  /** The call's arguments as the model gave them (a `budget` wait: `{spent_usd, limit_usd}`). */
  arguments: z.unknown(),
  /** ask_user's question, else null. */
  question: z.string().nullable(),
  since: z.iso.datetime(),
  deadline_at: z.iso.datetime(),
  /** What the deadline does: resume with a denial, or fail the job `approval_expired`. */
  on_deadline: z.enum(["deny", "fail"]),
});
export type WaitingFor = z.infer<typeof WaitingForSchema>;

export const ApprovalBodySchema = z
  .object({
    decision: z.enum(["approve", "deny"]),
    /** Given to the model as the tool result of a denied call; kept with an approval. */
    note: text().max(MAX_DECISION_NOTE_CHARS).optional(),
    /**
     * A `budget` wait only: US dollars added to the job tree's max_cost_usd when approving
     * (required there; refused on any other wait).
     */
    add_usd: z.number().gt(0).max(MAX_ADD_USD).optional(),
  })
  .strict()
  .refine((b) => b.add_usd === undefined || b.decision === "approve", {
    message: "add_usd goes with approve",
    path: ["add_usd"],
  });
export type ApprovalBody = z.infer<typeof ApprovalBodySchema>;

/** The decision recorded for the call (the first one; a repeat of it answers the same). */
export const ApprovalAnswerSchema = z.object({
  call_id: z.string(),
  decision: z.enum(["approve", "deny"]),
  note: z.string().nullable(),
  decided_at: z.iso.datetime(),
  /** `api`: this endpoint; `deadline`: nobody decided in time (on_deadline "deny"). */
  decided_by: z.enum(["api", "deadline"]),
  /** A `budget` wait's approval: what it added to the tree's limit (US dollars); else null. */
  add_usd: z.number().nullable(),
});
export type ApprovalAnswer = z.infer<typeof ApprovalAnswerSchema>;
