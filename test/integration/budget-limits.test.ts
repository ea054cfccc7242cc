/**
 * A run's and a tree's own budgets on the real stack (gateway in workerd, Postgres, Redis, host
 * processes, a provider of the test's own priced in the registry, a real MCP server for a second
 * turn): a job's `limits` on submit are never above its agent's (400); `limits.max_tokens`
 * bounds a tree's tokens like max_cost_usd its dollars (the job's own, narrower, applies; a
 * delegated child spends from the root's); `on_budget: "ask"` suspends at a `budget` waitpoint
 * holding nothing (`budget.exhausted`), survives a SIGKILL of every host while it waits, and
 * continues after an approval with `add_usd`, or fails `budget_exceeded` after a denial
 * (docs/quota.md, "A tree's budget" and "Asking at the limit").
 */
import { describe, expect, it } from "vitest";
import type { JobView } from "../../src/contracts/job";
import { budgetKeys, redisKeys } from "../../src/quota/keys";
import { createRedisClient } from "../../src/quota/redis";
import { readSse } from "../../tools/lib/sse";
import { waitFor } from "../../tools/stack/services/ports";
import { agentJobs, apiClient } from "../helpers/api";
import type { ProviderRequest } from "../helpers/fake-provider";
import { sampleValue } from "../helpers/metrics";
import { useProviderStack } from "../helpers/provider-stack";
import { requireBinary } from "../helpers/require";

const canRun = await requireBinary("redis-server", "apt-get install redis-server");

/**
 * $1,000 per million tokens in and out: one token is $0.001, so a few tokens pass a small limit.
 * `fake-backup` (a fallback, twice the price) is served by the same provider, told apart by the
 * request's `model`.
 */
const REGISTRY = JSON.stringify({
  default: "fake-model",
  models: [
    { name: "fake-model", pricing: { input_usd_per_mtok: 1000, output_usd_per_mtok: 1000 } },
    { name: "fake-backup", pricing: { input_usd_per_mtok: 2000, output_usd_per_mtok: 2000 } },
  ],
});
/** Every call's usage: 35 tokens, $0.035. */
const USAGE = { prompt_tokens: 10, completion_tokens: 25 };

type Msg = { role: string; content: string | null };
const messagesOf = (req: ProviderRequest) => req.body.messages as Msg[];
/** The case a request belongs to: its first user message names it. */
const caseOf = (req: ProviderRequest) => String(messagesOf(req).find((m) => m.role === "user")?.content ?? "");

describe.skipIf(!canRun)("run and tree budgets (job limits, max_tokens, on_budget ask) and model fallbacks", () => {
  const t = useProviderStack(
    (req) => {
      const messages = messagesOf(req);
      const c = caseOf(req);
      // The fallback cases: the primary refuses (429), or breaks after its first token.
      if (c === "case:fallback" && req.body.model === "fake-model") {
        return { kind: "error", status: 429, message: "slow down", headers: { "retry-after": "30" } };
      }
      if (c === "case:fallback-late" && req.body.model === "fake-model") {
        return { kind: "stream", pieces: ["half ", "answer"], cutAfter: 1 };
      }
      if (c.startsWith("case:fallback")) return { kind: "stream", pieces: [`${req.body.model} answers`], usage: USAGE };
      // A root's first turn calls a tool (or, in case:tree, delegates); every later turn, and a child's, answers.
      if (messages.some((m) => m.role === "tool") || c.startsWith("child:")) {
        return { kind: "stream", pieces: [`answer to ${c}`], usage: USAGE };
      }
      if (c.startsWith("case:tree")) {
        return {
          kind: "stream",
          toolCalls: [{ id: `d-${Date.now()}`, name: "delegate_tok-child", args: { input: "child: hi" } }],
          usage: USAGE,
        };
      }
      return {
        kind: "stream",
        toolCalls: [{ id: `e-${Date.now()}`, name: "files__echo", args: { text: c } }],
        usage: USAGE,
      };
    },
    (allowed) => ({
      hosts: 1,
      modelRegistry: REGISTRY,
      gatewayVars: { MCP_ALLOWED_URLS: allowed },
      hostEnv: { MCP_ALLOWED_URLS: allowed, SANDBOX_ENABLED: "false", HOST_REAP_MS: "300" },
    }),
  );
  const api = () => apiClient(t.stack.gatewayUrl, t.stack.apiKey);
  const jobs = agentJobs<JobView>(api, () => "fake-model");
  const echo = () => t.server(["echo"]);
  const requestsOf = (c: string) => t.provider.requests.filter((r) => caseOf(r) === c).length;
  const redis = () => createRedisClient(t.stack.upstash);
  const submitRaw = (body: Record<string, unknown>) =>
    api().call<{ job: JobView; error: { code: string; message: string } }>("POST", "/v1/jobs", {
      input: { messages: [{ role: "user", content: "hello" }] },
      ...body,
    });
  const decide = (id: string, callId: string, body: unknown) =>
    api().call<Record<string, unknown> & { error?: { code: string; message: string } }>(
      "POST",
      `/v1/jobs/${id}/approvals/${encodeURIComponent(callId)}`,
      body,
    );
  const typesOf = async (id: string) => (await api().events(id)).map((e) => ({ type: e.event, p: JSON.parse(e.data) }));

  it("a job's limits are never above its agent's: 400 when they are, and malformed limits are 400", async () => {
    await jobs.defineAgent("capped-a", { limits: { max_cost_usd: 0.5, max_tokens: 1000 } });
    const above = await submitRaw({ agent: "capped-a", limits: { max_cost_usd: 1 } });
    expect(above.status).toBe(400);
    expect(above.body.error.message).toMatch(/limits\.max_cost_usd: 1 is above its agent's limit of 0\.5/);
    const aboveTokens = await submitRaw({ agent: "capped-a", limits: { max_tokens: 1001 } });
    expect(aboveTokens.status).toBe(400);
    expect(aboveTokens.body.error.message).toMatch(/limits\.max_tokens: 1001 is above its agent's limit of 1000/);
    for (const bad of [{ max_tokens: "many" }, { max_cost_usd: -1 }, { on_budget: "maybe" }, { extra: 1 }]) {
      const r = await submitRaw({ agent: "capped-a", limits: bad });
      expect(r.status, JSON.stringify(bad)).toBe(400);
      expect(r.body.error.code).toBe("invalid_request");
    }
    // Narrower is fine, and so is any limit on an agent that sets none.
    const narrower = await submitRaw({
      agent: "capped-a",
      limits: { max_cost_usd: 0.1, max_tokens: 10, on_budget: "ask" },
    });
    expect(narrower.status).toBe(202);
    await jobs.defineAgent("open-a", {});
    expect((await submitRaw({ agent: "open-a", limits: { max_cost_usd: 50 } })).status).toBe(202);
    const row = await t.pool.query("select limits from jobs where id = $1", [narrower.body.job.id]);
    expect(row.rows[0].limits).toEqual({ max_cost_usd: 0.1, max_tokens: 10, on_budget: "ask" });
  });

  it("limits.max_tokens: the job's own (narrower than its agent's) fails the turn after the limit before its call", async () => {
    await jobs.defineAgent("tok", { mcp_servers: echo(), limits: { max_tokens: 100_000 } });
    const id = await jobs.submit("tok", {
      input: { messages: [{ role: "user", content: "case:tokens" }] },
      limits: { max_tokens: 30 },
    });
    const done = await jobs.finished(id);
    expect(done.state).toBe("failed");
    expect(done.error?.code).toBe("budget_exceeded");
    expect(done.error?.message).toMatch(/tree used 35 tokens of its limit of 30 \(limits\.max_tokens\)/);
    // Turn 1 (35 tokens) was admitted with nothing spent; turn 2 never reached the provider.
    expect(requestsOf("case:tokens")).toBe(1);
    expect(done.usage.prompt_tokens + done.usage.completion_tokens).toBe(35);
    const keys = redisKeys();
    expect(Number(await redis().get(keys.budgetSpent(budgetKeys.treeTokens(id))))).toBe(35);
    expect(await redis().zcard(keys.budgetReservations(budgetKeys.treeTokens(id)))).toBe(0);
  });

  it("a delegated child spends from its root's max_tokens: the child's first call is refused once the parent spent it", async () => {
    await jobs.defineAgent("tok-child", {});
    await jobs.defineAgent("tok-parent", { delegates: ["tok-child"], limits: { max_tokens: 30 } });
    const id = await jobs.submit("tok-parent", { input: { messages: [{ role: "user", content: "case:tree" }] } });
    const done = await jobs.finished(id);
    const child = (
      await t.pool.query<{ id: string; state: string; error: { code: string; message: string } }>(
        "select id, state, error from jobs where parent_job_id = $1",
        [id],
      )
    ).rows;
    expect(child).toHaveLength(1);
    // The child has no limit of its own: the root's (30 tokens, 35 spent by the parent's turn) refused it.
    expect(child[0]?.state).toBe("failed");
    expect(child[0]?.error.code).toBe("budget_exceeded");
    expect(child[0]?.error.message).toMatch(/tree used 35 tokens of its limit of 30/);
    expect(requestsOf("child: hi")).toBe(0);
    // The parent's next turn is refused the same way.
    expect(done.state).toBe("failed");
    expect(done.error?.code).toBe("budget_exceeded");
    expect(requestsOf("case:tree")).toBe(1);
  });

  it('on_budget "ask": budget.exhausted suspends holding nothing, survives a SIGKILL of every host, and add_usd continues the run', async () => {
    await jobs.defineAgent("asker", { mcp_servers: echo(), limits: { max_cost_usd: 0.01, on_budget: "ask" } });
    const id = await jobs.submit("asker", { input: { messages: [{ role: "user", content: "case:ask" }] } });
    const w = await jobs.waiting(id);
    expect(w.waiting_for).toMatchObject({
      kind: "budget",
      tool: "fake-model",
      arguments: { spent_usd: 0.035, limit_usd: 0.01 },
    });
    const callId = w.waiting_for?.call_id as string;
    expect(callId).toMatch(/^budget_2_/);
    // Holding nothing: no owner, no execution, no reservation; turn 2 never reached the provider.
    const row = (await t.pool.query("select owner, execution_id, checkpoint from jobs where id = $1", [id])).rows[0];
    expect(row).toMatchObject({ owner: null, execution_id: null, checkpoint: { v: 2, callId, turn: 1, budget: true } });
    expect(await redis().zcard(redisKeys().budgetReservations(budgetKeys.tree(id)))).toBe(0);
    expect(requestsOf("case:ask")).toBe(1);

    // Every host dies while it waits: nothing is lost, a new host resumes it. Killed once the
    // suspend's events are on the stream: a host killed between the suspend's commit and its
    // outbox's delivery loses them (docs/events.md, "What a SIGKILL can still lose").
    let suspendedOnStream = false;
    for await (const ev of readSse(`${t.stack.gatewayUrl}/v1/jobs/${id}/events`, {
      headers: { authorization: `Bearer ${t.stack.apiKey}` },
      signal: AbortSignal.timeout(10_000),
    })) {
      if (ev.event !== "run.suspended") continue;
      suspendedOnStream = true;
      break;
    }
    expect(suspendedOnStream).toBe(true);
    for (const h of t.stack.hosts.splice(0)) h.process.kill("SIGKILL");
    await new Promise((r) => setTimeout(r, 1000));
    expect((await jobs.job(id)).state).toBe("waiting");
    await t.stack.addHost();

    // Approve needs add_usd; add_usd goes with a budget wait only.
    const without = await decide(id, callId, { decision: "approve" });
    expect(without.status).toBe(400);
    expect(without.body.error?.message).toMatch(/approve it with add_usd/);
    expect((await decide(id, callId, { decision: "deny", add_usd: 1 })).status).toBe(400);
    const ok = await decide(id, callId, { decision: "approve", add_usd: 1 });
    expect(ok.status).toBe(202);
    expect(ok.body).toMatchObject({ call_id: callId, decision: "approve", add_usd: 1 });
    // The same decision again is answered with the recorded one; another add_usd is a conflict.
    expect((await decide(id, callId, { decision: "approve", add_usd: 1 })).status).toBe(200);
    expect((await decide(id, callId, { decision: "approve", add_usd: 2 })).status).toBe(409);

    const done = await jobs.finished(id);
    expect(done.state).toBe("completed");
    expect(done.output).toBe("answer to case:ask");
    expect(requestsOf("case:ask")).toBe(2);
    expect(done.budget_added_usd).toBe(1);
    expect(done.limits).toBeNull();
    // Each call reserved its worst case first: at least its 4,096-token output bound at $0.001 a token.
    expect(done.usage.reserved_usd).toBeGreaterThan(2 * 4.096);
    expect(done.usage.reserved_usd).toBeLessThan(2 * 4.096 + 1);
    expect(done.usage.cost_usd).toBeCloseTo(0.07, 12);
    const events = await typesOf(id);
    const exhausted = events.find((e) => e.type === "budget.exhausted");
    expect(exhausted?.p.payload).toMatchObject({ call_id: callId, spent_usd: 0.035, limit_usd: 0.01 });
    const types = events.map((e) => e.type);
    expect(types.indexOf("run.suspended")).toBeGreaterThan(types.indexOf("budget.exhausted"));
    expect(events.find((e) => e.type === "run.resumed")?.p.payload).toMatchObject({
      call_id: callId,
      decision: "approve",
    });
    expect(types.at(-1)).toBe("run.completed");
  });

  it("on_budget \"ask\" denied: the job fails budget_exceeded, and the job's own on_budget replaces its agent's", async () => {
    await jobs.defineAgent("asker-fail", { mcp_servers: echo(), limits: { max_cost_usd: 0.01 } });
    const id = await jobs.submit("asker-fail", {
      input: { messages: [{ role: "user", content: "case:deny" }] },
      limits: { on_budget: "ask" },
    });
    const w = await jobs.waiting(id);
    expect(w.waiting_for?.kind).toBe("budget");
    expect((await decide(id, w.waiting_for?.call_id as string, { decision: "deny" })).status).toBe(202);
    const done = await waitFor(
      "the denied job to fail",
      async () => {
        const j = await jobs.job(id);
        return j.state === "failed" ? j : null;
      },
      { timeoutMs: 30_000, intervalMs: 100 },
    );
    expect(done.error).toMatchObject({ code: "budget_exceeded" });
    expect(done.error?.message).toMatch(/denied/);
    expect(requestsOf("case:deny")).toBe(1);
  });

  it("a primary model answering 429 sends the turn to the fallback: the job completes there, the reason on the stream, usage and cost per model", async () => {
    await jobs.defineAgent("fb", { model: ["fake-model", "fake-backup"] });
    const agent = await api().call<{ agent: { model: unknown } }>("GET", "/v1/agents/fb");
    expect(agent.body.agent.model).toEqual(["fake-model", "fake-backup"]);
    const id = await jobs.submit("fb", { input: { messages: [{ role: "user", content: "case:fallback" }] } });
    const done = await jobs.finished(id);
    expect(done.state).toBe("completed");
    expect(done.output).toBe("fake-backup answers");
    // The job's model is the primary; the turn's call went to the fallback once the primary refused.
    expect(done.model).toBe("fake-model");
    const asked = t.provider.requests.filter((r) => caseOf(r) === "case:fallback").map((r) => r.body.model);
    expect(asked).toEqual(["fake-model", "fake-backup"]);
    const turns = (await typesOf(id)).filter((e) => e.type === "model.turn").map((e) => e.p.payload);
    expect(turns).toEqual([
      { turn: 1, reason: "start" },
      { turn: 1, reason: "fallback", from: "fake-model", to: "fake-backup", error: "rate_limited", status: 429 },
    ]);
    // Usage and cost per model: the refused call produced nothing; the fallback's is priced at its own rate.
    const usage = (
      await t.pool.query<{ model: string; tokens: number; cost: number }>(
        "select model, prompt_tokens + completion_tokens as tokens, cost_usd::float8 as cost from model_usage where job_id = $1",
        [id],
      )
    ).rows;
    expect(usage).toEqual([{ model: "fake-backup", tokens: 35, cost: 0.07 }]);
    expect(done.usage.cost_usd).toBeCloseTo(0.07, 12);
    const host = t.stack.hosts[0];
    expect(
      await sampleValue(host?.metricsUrl as string, "model_fallbacks_total", {
        from: "fake-model",
        to: "fake-backup",
        reason: "rate_limited",
      }),
    ).toBe(1);
  });

  it("after the first token a broken primary fails the turn as before: no fallback", async () => {
    await jobs.defineAgent("fb-late", { model: ["fake-model", "fake-backup"] });
    const id = await jobs.submit("fb-late", { input: { messages: [{ role: "user", content: "case:fallback-late" }] } });
    const done = await jobs.finished(id);
    expect(done.state).toBe("failed");
    expect(done.error?.code).toBe("provider_error");
    const asked = t.provider.requests.filter((r) => caseOf(r) === "case:fallback-late").map((r) => r.body.model);
    expect(asked).toEqual(["fake-model"]);
    expect((await typesOf(id)).some((e) => e.type === "model.turn" && e.p.payload.reason === "fallback")).toBe(false);
  });
});
