/**
 * Evals on the real stack (docs/architecture.md, "Evals"): the gateway in workerd, Postgres,
 * Redis, one sandbox-host and the mock model. Cases run as jobs of the agent version; the host
 * scores each when its job ends: the exact scorers, a tenant regex that backtracks (stopped at its
 * time bound on a worker thread, the case's other scorers still scored), and a judge that is a
 * job of the tenant's own agent, given the case's answer as its last message. A replay's jobs
 * become cases expecting their sources' answers; two evals compare case by case; another
 * tenant's eval is 404 and bad bodies are 400.
 */
import { drizzle } from "drizzle-orm/node-postgres";
import { describe, expect, it } from "vitest";
import type { EvalCompare, EvalListItem, EvalView } from "../../src/contracts/eval";
import type { JobView } from "../../src/contracts/job";
import * as schema from "../../src/db/schema";
import { createApiKey, createTenant } from "../../src/db/tenants-repo";
import { waitFor } from "../../tools/stack/services/ports";
import { agentJobs, apiClient } from "../helpers/api";
import { requireBinary } from "../helpers/require";
import { useStack } from "../helpers/stack";

const canRun = await requireBinary("redis-server", "apt-get install redis-server");

const user = (content: string) => ({ messages: [{ role: "user", content }] });
const script = (s: Record<string, unknown>) => `!mock ${JSON.stringify(s)}`;

describe.skipIf(!canRun)("evals: cases as jobs, scored by the hosts when they end", () => {
  const t = useStack({ hosts: 1, mockModel: { ttftMs: 5, tokensPerS: 2000 } });
  const api = () => apiClient(t.stack.gatewayUrl, t.stack.apiKey);
  const jobs = agentJobs<JobView>(api, () => t.stack.modelName);

  const createEval = async (body: Record<string, unknown>) => {
    const r = await api().call<{ eval: { id: string; cases_total: number } }>("POST", "/v1/evals", body);
    expect(r.status, JSON.stringify(r.body)).toBe(202);
    return r.body.eval;
  };
  const scored = (id: string, timeoutMs = 90_000) =>
    waitFor(
      `eval ${id} to be scored`,
      async () => {
        const r = await api().call<{ eval: EvalView }>("GET", `/v1/evals/${id}`);
        expect(r.status).toBe(200);
        const e = r.body.eval;
        return e.summary.scored === e.cases_total ? e : null;
      },
      { timeoutMs, intervalMs: 200 },
    );

  it("takes a replay's jobs as cases, each expecting its source's answer", async () => {
    await jobs.defineAgent("answerer", { instructions: "Paris" });
    const v2 = await api().call("POST", "/v1/agents/answerer/versions", {
      model: t.stack.modelName,
      instructions: "Lyon",
    });
    expect(v2.status, JSON.stringify(v2.body)).toBe(201);
    const source = await jobs.submit("answerer@1", { input: user(script({ echo_system: true })) });
    expect((await jobs.finished(source)).output).toBe("Paris");
    // By filter (before the replay: its own job of answerer@1, once completed, would be the newest
    // the filter finds) and by the replay's id: the same source, expected answer "Paris"; v2 says "Lyon".
    const replayOf = async (i: number) => {
      if (i === 0) return { agent: "answerer@1", state: "completed", limit: 1 };
      const replay = await api().call<{ replay: { id: string } }>("POST", "/v1/replays", {
        filter: { agent: "answerer@1", limit: 1 },
      });
      expect(replay.status).toBe(202);
      return replay.body.replay.id;
    };
    for (const i of [0, 1]) {
      const made = await createEval({
        agent: "answerer@2",
        replay_of: await replayOf(i),
        scorers: [{ type: "equals" }],
      });
      expect(made.cases_total).toBe(1);
      const e = await scored(made.id);
      const [c] = e.cases;
      expect(c?.source_job_id).toBe(source);
      expect(c?.expect).toBe("Paris");
      expect(c?.output).toBe("Lyon");
      expect(c?.scores).toEqual([
        { scorer: "equals", type: "equals", score: 0, pass: false, reason: "the answer is not the expected one" },
      ]);
      expect(e.agent_version).toEqual({ name: "answerer", version: 2 });
    }
  }, 120_000);

  it("scores each case with every scorer: exact, a runaway regex stopped at its bound, a judge run as a job", async () => {
    await jobs.defineAgent("grader", {});
    // The judge sees the case's answer as its last message; this answer is a script for the
    // mock model, so the judge (a real job of the grader agent) replies {"score":0.25,…}.
    const judged = script({ reply: JSON.stringify({ score: 0.25, reason: "half right" }) });
    const made = await createEval({
      agent: "answerer@1",
      cases: [
        { input: user(script({ echo_system: true })), expect: "Paris" },
        { input: user(script({ reply: judged })) },
        { input: user(script({ reply: `${"a".repeat(30)}!` })), expect: "a" },
      ],
      scorers: [
        { type: "equals" },
        { type: "contains", name: "says-par", value: "Par" },
        { type: "regex", pattern: "^p", flags: "i" },
        { type: "json_schema", schema: { type: "object", required: ["score"] } },
        { type: "regex", name: "runaway", pattern: "(a+)+$" },
        { type: "judge", agent: "grader", threshold: 0.2 },
      ],
    });
    expect(made.cases_total).toBe(3);
    const e = await scored(made.id);
    const by = (i: number) => Object.fromEntries((e.cases[i]?.scores ?? []).map((s) => [s.scorer, s]));

    const paris = by(0);
    expect(e.cases[0]?.output).toBe("Paris");
    expect(paris.equals).toMatchObject({ score: 1, pass: true });
    expect(paris["says-par"]).toMatchObject({ score: 1, pass: true });
    expect(paris.regex).toMatchObject({ score: 1, pass: true });
    expect(paris.json_schema).toMatchObject({ score: 0, pass: false });
    expect(paris.runaway).toMatchObject({ score: 0, pass: false });
    // The mock echoes a message that is no script: the judge's reply is no verdict, and says so.
    expect(paris.judge).toMatchObject({ score: null, pass: null });
    expect(paris.judge?.reason).toContain('not {"score"');

    const half = by(1);
    expect(half.equals).toMatchObject({ score: null, reason: expect.stringContaining("no value") });
    expect(half.json_schema).toMatchObject({ score: 0, pass: false }); // a script is not JSON
    expect(half.judge).toMatchObject({ score: 0.25, pass: true, reason: "half right" });
    const judgeJob = await jobs.job(half.judge?.judge_job_id as string);
    expect(judgeJob.state).toBe("completed");
    expect(judgeJob.agent).toMatchObject({ name: "grader" });
    const judgeInput = (await api().call<{ job: JobView & { input?: unknown } }>("GET", `/v1/jobs/${judgeJob.id}`)).body
      .job;
    expect(judgeInput.output).toBe(JSON.stringify({ score: 0.25, reason: "half right" }));

    const runaway = by(2);
    expect(runaway.runaway).toMatchObject({ score: null, pass: null });
    expect(runaway.runaway?.reason).toContain("timed out");
    expect(runaway["says-par"]).toMatchObject({ score: 0, pass: false });
    expect(runaway.equals).toMatchObject({ score: 0 });

    // Each case: its job, cost, latency; the summary over them.
    for (const c of e.cases) {
      expect((await jobs.job(c.job_id)).state).toBe("completed");
      expect(c.latency_ms).toBeGreaterThanOrEqual(0);
      expect(c.pass).toBe(false);
    }
    expect(e.cases[1]?.score).toBeCloseTo((0 + 0 + 0 + 0 + 0 + 0.25) / 5, 6); // equals did not score
    expect(e.summary).toMatchObject({ cases_total: 3, finished: 3, scored: 3, passed: 0, pass_rate: 0 });
    const lat = e.cases.map((c) => c.latency_ms as number).sort((x, y) => x - y);
    expect(e.summary.latency_p50_ms).toBe(lat[1]);
    expect(e.summary.latency_p95_ms).toBe(lat[2]);
    const mean = e.cases.reduce((s, c) => s + (c.score as number), 0) / 3;
    expect(e.summary.mean_score).toBeCloseTo(mean, 6);
  }, 150_000);

  it("a case left as a host dying mid-pass leaves it is scored again the same, with the same judge job", async () => {
    // What a host SIGKILLed between making a case's judge job and recording it leaves in
    // Postgres: the judge job exists, the case names none and has no scores. The next pass of
    // any host must find that job by its key (no second judge job) and score the case as before.
    const judged = script({ reply: JSON.stringify({ score: 0.75, reason: "fine" }) });
    const made = await createEval({
      agent: "answerer@1",
      cases: [{ input: user(script({ reply: judged })) }],
      scorers: [
        { type: "judge", agent: "grader" },
        { type: "contains", value: "fine" },
      ],
    });
    const before = (await scored(made.id)).cases[0];
    expect(before?.scores?.[0]).toMatchObject({ score: 0.75, pass: true });
    const judgeJobs = async () =>
      (
        await t.pool.query<{ id: string }>("SELECT id FROM jobs WHERE idempotency_key LIKE $1", [`eval:${made.id}:%`])
      ).rows.map((r) => r.id);
    expect(await judgeJobs()).toEqual([before?.scores?.[0]?.judge_job_id]);

    await t.pool.query(
      "UPDATE eval_cases SET judge_jobs = NULL, scores = NULL, score = NULL, pass = NULL, scored_at = NULL WHERE eval_id = $1",
      [made.id],
    );
    // A pass dies in a busy fleet (a case to score keeps it so); this one may have gone idle or
    // to sleep since, so a job wakes it as the crash's fleet would be awake.
    await jobs.finished(await jobs.submit("answerer@1", { input: user("wake") }));
    const after = (await scored(made.id)).cases[0];
    expect(after?.scores).toEqual(before?.scores);
    expect(after?.scored_at).not.toBe(before?.scored_at);
    expect(await judgeJobs()).toEqual([before?.scores?.[0]?.judge_job_id]);
  }, 120_000);

  it("compares two evals case by case and lists them with their summaries", async () => {
    const cases = [{ input: user(script({ echo_system: true })), expect: "Paris" }];
    const a = await createEval({ agent: "answerer@1", cases, scorers: [{ type: "equals" }] });
    const b = await createEval({ agent: "answerer@2", cases, scorers: [{ type: "equals" }] });
    await scored(a.id);
    await scored(b.id);
    const r = await api().call<EvalCompare>("GET", `/v1/evals/${a.id}/compare/${b.id}`);
    expect(r.status).toBe(200);
    expect(r.body.a.summary).toMatchObject({ pass_rate: 1, mean_score: 1 });
    expect(r.body.b.summary).toMatchObject({ pass_rate: 0, mean_score: 0 });
    expect(r.body.pairs).toHaveLength(1);
    expect(r.body.pairs[0]).toMatchObject({ index: 0, same_case: true, score_delta: -1 });
    expect(r.body.pairs[0]?.a?.output).toBe("Paris");
    expect(r.body.pairs[0]?.b?.output).toBe("Lyon");

    const page = await api().call<{ evals: EvalListItem[]; next_cursor: string | null }>("GET", "/v1/evals?limit=1");
    expect(page.body.evals.map((x) => x.id)).toEqual([b.id]);
    expect(page.body.next_cursor).not.toBeNull();
    const next = await api().call<{ evals: EvalListItem[] }>(
      "GET",
      `/v1/evals?limit=1&cursor=${page.body.next_cursor}`,
    );
    expect(next.body.evals.map((x) => x.id)).toEqual([a.id]);
    expect(next.body.evals[0]?.summary.pass_rate).toBe(1);
  }, 120_000);

  it("answers another tenant's eval 404 and refuses bad bodies 400", async () => {
    const mine = (await api().call<{ evals: EvalListItem[] }>("GET", "/v1/evals?limit=1")).body.evals[0]?.id as string;
    const db = drizzle(t.pool, { schema });
    await createTenant(db, "evals-other", "other");
    const other = apiClient(t.stack.gatewayUrl, (await createApiKey(db, "evals-other", "evals test")).key);
    expect((await other.call("GET", `/v1/evals/${mine}`)).status).toBe(404);
    expect((await other.call("GET", `/v1/evals/${mine}/compare/${mine}`)).status).toBe(404);
    expect((await api().call("GET", `/v1/evals/${mine}/compare/${crypto.randomUUID()}`)).status).toBe(404);
    expect((await api().call("GET", "/v1/evals/not-a-uuid")).status).toBe(404);
    expect((await other.call<{ evals: unknown[] }>("GET", "/v1/evals")).body.evals).toEqual([]);

    const cases = [{ input: user("hi") }];
    const bad = async (body: unknown, status: number, says: string) => {
      const r = await api().call<{ error: { message: string } }>("POST", "/v1/evals", body);
      expect(r.status, JSON.stringify(r.body)).toBe(status);
      expect(r.body.error.message).toContain(says);
    };
    await bad("{not json", 400, "");
    await bad({ agent: "answerer", scorers: [{ type: "equals" }] }, 400, "exactly one of cases and replay_of");
    await bad({ agent: "answerer", cases, scorers: [] }, 400, "scorers");
    await bad({ agent: "answerer", cases, scorers: [{ type: "equals" }, { type: "equals" }] }, 400, "two scorers");
    await bad({ agent: "answerer", cases, scorers: [{ type: "regex", pattern: "(" }] }, 400, "scorers[0].pattern");
    await bad(
      { agent: "answerer", cases, scorers: [{ type: "json_schema", schema: { type: "nope" } }] },
      400,
      "scorers[0].schema",
    );
    await bad({ agent: "answerer", cases, scorers: [{ type: "judge", agent: "nobody" }] }, 400, "scorers[0]");
    await bad({ agent: "nobody", cases, scorers: [{ type: "equals" }] }, 400, "agent");
    await bad({ agent: "answerer", cases, scorers: [{ type: "equals", extra: 1 }] }, 400, "");
    await bad(
      { agent: "answerer", replay_of: crypto.randomUUID(), scorers: [{ type: "equals" }] },
      404,
      "replay not found",
    );
    // Another tenant's replay is not this tenant's either.
    const theirs = await other.call<{ replay: { id: string } }>("POST", "/v1/replays", { filter: { limit: 1 } });
    expect(theirs.status).toBe(202);
    await bad({ agent: "answerer", replay_of: theirs.body.replay.id, scorers: [{ type: "equals" }] }, 404, "replay");
  }, 60_000);
});
