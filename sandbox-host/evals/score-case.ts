/**
 * One scorer's verdict on one case's answer, as it runs on an offload thread (offload/tasks.ts,
 * task `scoreAnswer`): why there is eval-scorer.ts' to say. Kept apart from it, so the worker's
 * task table does not import the pool it is run by. Pure: no I/O, plain data in and out.
 */
// Types only: the contract module brings zod, which an offload thread need not load.
import type { Scorer, ScoreView } from "../../src/contracts/eval";
import { checkAnswerNow } from "../runner/answer-check";

/** What a judge scorer knows of its judge job (or why there is none). */
export type JudgeOutcome =
  | { kind: "answered"; jobId: string; state: string; output: string | null }
  | { kind: "refused"; reason: string };

export interface ScoreInput {
  scorer: Scorer;
  /** Its name in the scores (scorerNameOf, resolved by the caller). */
  name: string;
  /** A judge's pass mark (its `threshold` or DEFAULT_JUDGE_THRESHOLD, resolved by the caller). */
  threshold: number;
  /** The case's answer; null when its job did not complete (`failure` says how it ended). */
  output: string | null;
  failure: string | null;
  expect: string | null;
  judge?: JudgeOutcome;
}

/** The judge's reply, parsed: `{"score": 0..1, "reason": "…"}` (in a code fence or not). */
export function parseJudgeReply(reply: string): { score: number; reason: string } | string {
  const checked = checkAnswerNow(JUDGE_REPLY_SCHEMA, reply);
  if (!checked.ok) return `the judge's reply is not {"score": 0..1, "reason"}: ${checked.problems}`;
  const v = checked.value as { score: number; reason?: string };
  return { score: v.score, reason: v.reason ?? "" };
}

/** What a judge must reply (the judge agent may declare it as its response_format). */
export const JUDGE_REPLY_SCHEMA: Record<string, unknown> = {
  type: "object",
  properties: { score: { type: "number", minimum: 0, maximum: 1 }, reason: { type: "string" } },
  required: ["score"],
};

type Named = Pick<ScoreInput, "scorer" | "name">;

function verdict(s: Named, score: number | null, pass: boolean | null, reason: string | null): ScoreView {
  return { scorer: s.name, type: s.scorer.type, score, pass, reason };
}

const exact = (s: Named, ok: boolean, reason: string) => verdict(s, ok ? 1 : 0, ok, ok ? null : reason);

export function scoreAnswerNow(input: ScoreInput): ScoreView {
  const { scorer: s, output, expect } = input;
  // A case whose job did not complete has no answer to score: it fails every scorer (no judge is asked).
  if (output === null) return verdict(input, 0, false, input.failure ?? "the job has no answer");
  if (s.type === "judge") return judgeVerdict(input, input.judge);
  switch (s.type) {
    case "equals": {
      const want = s.value ?? expect;
      if (want === null) return verdict(input, null, null, "no value to compare with (give the case an expect)");
      return exact(input, output.trim() === want.trim(), "the answer is not the expected one");
    }
    case "contains": {
      const want = s.value ?? expect;
      if (want === null) return verdict(input, null, null, "no value to look for (give the case an expect)");
      return exact(input, output.includes(want), "the answer does not contain the expected text");
    }
    case "regex":
      return exact(input, new RegExp(s.pattern, s.flags ?? "").test(output), "the answer does not match the pattern");
    case "json_schema": {
      const checked = checkAnswerNow(s.schema, output);
      return checked.ok ? exact(input, true, "") : exact(input, false, checked.problems);
    }
  }
}

function judgeVerdict(s: ScoreInput, judge: JudgeOutcome | undefined): ScoreView {
  if (!judge) return verdict(s, null, null, "no judge job");
  if (judge.kind === "refused") return verdict(s, null, null, judge.reason);
  const withJob = (v: ScoreView): ScoreView => ({ ...v, judge_job_id: judge.jobId });
  if (judge.state !== "completed" || judge.output === null) {
    return withJob(verdict(s, null, null, `the judge's job ended ${judge.state} without an answer`));
  }
  const parsed = parseJudgeReply(judge.output);
  if (typeof parsed === "string") return withJob(verdict(s, null, null, parsed));
  const pass = parsed.score >= s.threshold;
  return withJob(verdict(s, parsed.score, pass, parsed.reason || null));
}

/** A case's score (the mean of its scorers' scores that scored) and pass (each of those passed, at least one). */
export function caseResult(scores: ScoreView[]): { score: number | null; pass: boolean } {
  const scored = scores.filter((v) => v.score !== null);
  if (scored.length === 0) return { score: null, pass: false };
  const score = scored.reduce((sum, v) => sum + (v.score as number), 0) / scored.length;
  return { score, pass: scored.every((v) => v.pass === true) };
}
