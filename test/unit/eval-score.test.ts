/**
 * Each eval scorer's verdict on one answer (sandbox-host/evals/score-case.ts, run by the hosts on
 * the offload pool), the judge's reply, a case's score and pass, and what a judge is given.
 * The real-process path (cases as jobs, a judge job, the time bound) is test/integration/evals.test.ts.
 */
import { describe, expect, it } from "vitest";
import { judgeMessages } from "../../sandbox-host/evals/eval-scorer";
import { caseResult, parseJudgeReply, scoreAnswerNow } from "../../sandbox-host/evals/score-case";
import { CreateEvalBodySchema, DEFAULT_JUDGE_THRESHOLD, type Scorer, scorerNameOf } from "../../src/contracts/eval";

const score = (scorer: Scorer, output: string | null, expect: string | null = null, judge?: never) =>
  scoreAnswerNow({
    scorer,
    name: scorerNameOf(scorer),
    threshold: DEFAULT_JUDGE_THRESHOLD,
    output,
    failure: output === null ? "the job ended failed" : null,
    expect,
    judge,
  });

describe("eval scorers", () => {
  it("equals and contains compare with the scorer's value or the case's expect", () => {
    expect(score({ type: "equals" }, " Paris\n", "Paris")).toMatchObject({ score: 1, pass: true, reason: null });
    expect(score({ type: "equals" }, "Lyon", "Paris")).toMatchObject({ score: 0, pass: false });
    expect(score({ type: "equals", value: "Lyon" }, "Lyon", "Paris")).toMatchObject({ score: 1 });
    expect(score({ type: "equals" }, "Lyon")).toMatchObject({ score: null, pass: null });
    expect(score({ type: "contains", name: "has", value: "ar" }, "Paris")).toMatchObject({ scorer: "has", score: 1 });
    expect(score({ type: "contains" }, "Paris", "yon")).toMatchObject({ score: 0 });
  });

  it("regex searches with its flags; json_schema parses (fenced or not) and validates", () => {
    expect(score({ type: "regex", pattern: "^p", flags: "i" }, "Paris")).toMatchObject({ score: 1 });
    expect(score({ type: "regex", pattern: "^p" }, "Paris")).toMatchObject({ score: 0 });
    const schema = { type: "object", required: ["n"], properties: { n: { type: "integer" } } };
    expect(score({ type: "json_schema", schema }, '```json\n{"n": 3}\n```')).toMatchObject({ score: 1 });
    const wrong = score({ type: "json_schema", schema }, '{"n": "x"}');
    expect(wrong).toMatchObject({ score: 0, pass: false });
    expect(wrong.reason).toBeTruthy();
    expect(score({ type: "json_schema", schema }, "not json").reason).toContain("not JSON");
  });

  it("a case without an answer fails every scorer, the judge included, saying how its job ended", () => {
    for (const s of [{ type: "equals" }, { type: "judge", agent: "g" }] as Scorer[]) {
      expect(score(s, null, "x")).toMatchObject({ score: 0, pass: false, reason: "the job ended failed" });
    }
  });

  it("a judge's verdict is its reply's score against the threshold; anything else scores null", () => {
    const judge = (j: Parameters<typeof scoreAnswerNow>[0]["judge"], threshold?: number) =>
      scoreAnswerNow({
        scorer: { type: "judge", agent: "g", threshold },
        name: "judge",
        threshold: threshold ?? DEFAULT_JUDGE_THRESHOLD,
        output: "a",
        failure: null,
        expect: null,
        judge: j,
      });
    const answered = (output: string | null, state = "completed") =>
      ({ kind: "answered", jobId: "00000000-0000-4000-8000-000000000001", state, output }) as const;
    expect(judge(answered('{"score": 0.6, "reason": "ok"}'))).toMatchObject({
      score: 0.6,
      pass: true,
      reason: "ok",
      judge_job_id: "00000000-0000-4000-8000-000000000001",
    });
    expect(judge(answered('{"score": 0.6}'), 0.7)).toMatchObject({ score: 0.6, pass: false, reason: null });
    expect(judge(answered('{"score": 1.5}'))).toMatchObject({ score: null, pass: null });
    expect(judge(answered("Echo: a")).reason).toContain('not {"score"');
    expect(judge(answered(null, "failed")).reason).toContain("ended failed");
    expect(judge({ kind: "refused", reason: "archived" })).toMatchObject({ score: null, reason: "archived" });
    expect(parseJudgeReply('```\n{"score": 0, "reason": "no"}\n```')).toEqual({ score: 0, reason: "no" });
  });

  it("a case's score is the mean of the scores that scored; it passes only when each of them passed", () => {
    const v = (score: number | null, pass: boolean | null) => ({
      scorer: "s",
      type: "equals" as const,
      score,
      pass,
      reason: null,
    });
    expect(caseResult([v(1, true), v(0.5, true), v(null, null)])).toEqual({ score: 0.75, pass: true });
    expect(caseResult([v(1, true), v(0, false)])).toEqual({ score: 0.5, pass: false });
    expect(caseResult([v(null, null)])).toEqual({ score: null, pass: false });
  });

  it("a judge is given the case in a first message and the answer exactly as the last", () => {
    const m = judgeMessages({
      input: { messages: [{ role: "user", content: "capital?" }] },
      expect: "Paris",
      output: "Lyon",
    });
    expect(m).toHaveLength(2);
    expect(m[0]?.content).toContain("user: capital?");
    expect(m[0]?.content).toContain("Paris");
    expect(m[1]).toEqual({ role: "user", content: "Lyon" });
  });

  it("the body takes exactly one of cases and replay_of, and unique scorer names", () => {
    const cases = [{ input: { messages: [{ role: "user", content: "hi" }] } }];
    expect(CreateEvalBodySchema.safeParse({ agent: "a", cases, scorers: [{ type: "equals" }] }).success).toBe(true);
    expect(CreateEvalBodySchema.safeParse({ agent: "a", scorers: [{ type: "equals" }] }).success).toBe(false);
    const both = {
      agent: "a",
      cases,
      replay_of: "00000000-0000-4000-8000-000000000001",
      scorers: [{ type: "equals" }],
    };
    expect(CreateEvalBodySchema.safeParse(both).success).toBe(false);
    const twice = {
      agent: "a",
      cases,
      scorers: [
        { type: "regex", pattern: "a" },
        { type: "regex", pattern: "b" },
      ],
    };
    expect(CreateEvalBodySchema.safeParse(twice).success).toBe(false);
    expect(
      CreateEvalBodySchema.safeParse({ agent: "a", cases, scorers: [{ type: "regex", pattern: "a", flags: "gg" }] })
        .success,
    ).toBe(false);
  });
});
