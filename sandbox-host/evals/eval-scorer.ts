/**
 * The eval scorer: every host scores the eval cases whose job ended (docs/architecture.md,
 * "Evals"). All of its state is in Postgres: a case is scored when its scores are written
 * (`writeScores`, once: `scored_at IS NULL` in the UPDATE), so a host that dies mid-pass loses
 * nothing; the next pass of any host finds the case still unscored and scores it again. A judge
 * scorer's job is made with an idempotency key of the case and the scorer (`evalJudgeKey`), so a
 * pass repeated after a crash between the insert and `recordJudgeJob` finds the same job, never
 * a second one; the case is scored at the first pass after that job ended.
 *
 * Each scorer runs on the offload pool, never on the event loop: a regex and a JSON Schema are
 * the tenant's to choose, and a pattern like `(a+)+$` backtracks for minutes on 30 characters
 * with nothing able to interrupt it (runner/response-format.ts, the same bound for an agent's
 * response_format). Past SCORE_TIMEOUT_MS the thread is ended and that scorer's score is null,
 * saying it timed out; the case's other scorers still score.
 *
 * Cadence: every EVAL_SCORE_MS while the fleet is busy; no statement while it is idle, since the
 * fleet is not idle while a case waits to be scored (fleetWork's `scoring`).
 */

import { ApiError } from "../../src/contracts/errors";
import {
  DEFAULT_JUDGE_THRESHOLD,
  evalJudgeKey,
  type Scorer,
  type ScoreView,
  scorerNameOf,
} from "../../src/contracts/eval";
import { type ChatMessage, LIMITS } from "../../src/contracts/job";
import { isFinalState } from "../../src/contracts/job-state";
import { admitJob } from "../../src/db/admission-repo";
import type { Db } from "../../src/db/client";
import { type PendingCase, pendingCases, recordJudgeJob, writeScores } from "../../src/db/evals-repo";
import { createJob } from "../../src/db/jobs-repo";
import { resolveRunnableAgent } from "../../src/db/schedules-repo";
import type { AdmissionRules } from "../../src/domain/job-admission";
import type { FleetActivity } from "../lifecycle/activity";
import { PeriodicService } from "../lifecycle/periodic";
import { errorFields, type Logger } from "../log";
import { OffloadTimeoutError } from "../offload/offload-errors";
import type { OffloadPool } from "../offload/pool";
import { ANSWER_CHECK_TIMEOUT_MS } from "../runner/response-format";
import { caseResult, type JudgeOutcome, type ScoreInput } from "./score-case";

/** The scorer's period while the fleet is busy: a case is scored within about this of its job's end. */
export const EVAL_SCORE_MS = 1000;
/** Cases one pass takes (the rest wait for the next pass). */
export const EVAL_SCORE_BATCH = 50;
/**
 * How long one scorer may run on its thread: the response_format check's bound, for the same
 * reason (a real regex or schema check takes milliseconds; one past this is a runaway).
 */
export const SCORE_TIMEOUT_MS = ANSWER_CHECK_TIMEOUT_MS;

export interface EvalScorerOptions {
  db: Db;
  log: Logger;
  offload: Pick<OffloadPool, "run">;
  /** What a judge job is admitted by (the scheduler's rules: this host's models and queued cap). */
  admission: AdmissionRules;
  activity?: FleetActivity;
  everyMs?: number;
}

export class EvalScorer extends PeriodicService {
  constructor(private readonly opts: EvalScorerOptions) {
    super(
      {
        name: "eval scorer",
        everyMs: opts.everyMs ?? EVAL_SCORE_MS,
        spread: 0.2,
        onError: (err) => opts.log.warn("eval scoring pass failed", errorFields(err)),
        activity: opts.activity,
      },
      () => this.pass(),
    );
  }

  /** One pass: each pending case scored, or its judge jobs made; returns how many were scored. */
  async pass(): Promise<number> {
    // Idle (and sure): the fleet's look found no case to score (fleetWork's `scoring`), so this
    // pass would be a statement that finds nothing; a case that comes due ends idleness first.
    if (this.opts.activity?.asleep || this.opts.activity?.idleAndSure) return 0;
    let scored = 0;
    for (const c of await pendingCases(this.opts.db, EVAL_SCORE_BATCH)) {
      try {
        if (await this.scoreCase(c)) scored++;
      } catch (err) {
        // One case's failure (a full offload queue, a statement) leaves it pending for the next pass.
        this.opts.log.warn("eval case not scored", { eval_id: c.evalId, case: c.index, ...errorFields(err) });
      }
    }
    return scored;
  }

  private async scoreCase(c: PendingCase): Promise<boolean> {
    const scorers = c.scorers as Scorer[];
    const answered = c.state === "completed" && c.output !== null;
    const judges: Record<string, JudgeOutcome> = {};
    let waiting = false;
    for (const s of scorers) {
      if (s.type !== "judge" || !answered) continue;
      const name = scorerNameOf(s);
      const jobId = c.judgeJobs[name];
      if (jobId === undefined) {
        const made = await this.makeJudgeJob(c, s);
        if (made.kind === "refused") judges[name] = made;
        else {
          await recordJudgeJob(this.opts.db, c.evalId, c.index, name, made.jobId);
          waiting = true;
        }
        continue;
      }
      const facts = c.judges[jobId];
      if (facts?.state && !isFinalState(facts.state)) waiting = true;
      judges[name] = { kind: "answered", jobId, state: facts?.state ?? "gone (purged)", output: facts?.output ?? null };
    }
    if (waiting) return false;
    const failure = answered
      ? null
      : `the job ended ${c.state ?? "and is gone (purged)"}${c.error ? ` (${c.error.code})` : ""} without an answer`;
    const scores = await Promise.all(
      scorers.map((s) =>
        this.scoreOne({
          scorer: s,
          name: scorerNameOf(s),
          threshold: s.type === "judge" ? (s.threshold ?? DEFAULT_JUDGE_THRESHOLD) : 0,
          output: answered ? c.output : null,
          failure,
          expect: c.expect,
          judge: judges[scorerNameOf(s)],
        }),
      ),
    );
    const won = await writeScores(this.opts.db, c.evalId, c.index, { scores, ...caseResult(scores) });
    if (won) this.opts.log.info("eval case scored", { eval_id: c.evalId, case: c.index, job_id: c.jobId });
    return won;
  }

  private async scoreOne(input: ScoreInput): Promise<ScoreView> {
    try {
      return await this.opts.offload.run("scoreAnswer", [input], { timeoutMs: SCORE_TIMEOUT_MS });
    } catch (err) {
      if (!(err instanceof OffloadTimeoutError)) throw err;
      return {
        scorer: input.name,
        type: input.scorer.type,
        score: null,
        pass: null,
        reason: `the scorer timed out after ${err.timeoutMs} ms (a pattern that backtracks on this answer?) and was stopped`,
      };
    }
  }

  /** The case's judge job for scorer `s`, made (or found, by its key) and admitted as a schedule's tick is. */
  private async makeJudgeJob(
    c: PendingCase,
    s: Extract<Scorer, { type: "judge" }>,
  ): Promise<{ kind: "made"; jobId: string } | Extract<JudgeOutcome, { kind: "refused" }>> {
    const { db, admission } = this.opts;
    const agent = await resolveRunnableAgent(db, c.tenantId, s.agent);
    if (!agent) return { kind: "refused", reason: `the judge agent ${s.agent} is gone or archived` };
    const refused = await admitJob(db, admission, c.tenantId, { model: agent.model, tools: agent.tools });
    if (refused) return { kind: "refused", reason: `the judge's job was not admitted: ${refused.message}` };
    try {
      const { job } = await createJob(
        db,
        c.tenantId,
        crypto.randomUUID(),
        {
          agent: `${agent.name}@${agent.version}`,
          input: { messages: judgeMessages(c) },
          idempotency_key: evalJudgeKey(c.evalId, c.index, scorerNameOf(s)),
        },
        { agent, maxQueued: admission.maxQueued },
      );
      return { kind: "made", jobId: job.id };
    } catch (err) {
      if (err instanceof ApiError)
        return { kind: "refused", reason: `the judge's job was not admitted: ${err.message}` };
      throw err;
    }
  }
}

const cut = (s: string, n: number) => (s.length <= n ? s : `${s.slice(0, n - 1)}…`);

/**
 * What a judge is given: the case (its conversation and what it expects) in one message, the
 * answer to grade as the last one, so a judge sees the answer exactly as the agent gave it.
 */
export function judgeMessages(c: Pick<PendingCase, "input" | "expect" | "output">): ChatMessage[] {
  const room = LIMITS.maxMessageChars - 400;
  const conversation = c.input.messages.map((m) => `${m.role}: ${m.content}`).join("\n");
  const expected = c.expect === null ? "" : `\n\nThe expected answer:\n${cut(c.expect, room / 4)}`;
  return [
    {
      role: "user",
      content: `Grade the answer in the next message to the conversation below. Reply with only a JSON object {"score": <a number from 0 to 1>, "reason": "<one sentence>"}.\n\nThe conversation:\n${cut(conversation, room / 2)}${expected}`,
    },
    { role: "user", content: cut(c.output ?? "", LIMITS.maxMessageChars) },
  ];
}
