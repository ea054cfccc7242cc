/**
 * Agents end to end, both halves through the public API on the real stack (gateway in workerd,
 * Postgres, Redis, one sandbox-host, the mock model): an agent defined with POST /v1/agents runs
 * its instructions, sampling and response_format on the host; the job view shows the agent
 * version, the JSON answer and the usage the host recorded, GET /v1/usage sums the same calls,
 * and the events carry the model.retry of a provider failure and a model.turn at every model turn.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { JobView } from "../../src/contracts/job";
import { waitFor } from "../../tools/stack/services/ports";
import { type Stack, startStack } from "../../tools/stack/start";
import { apiClient } from "../helpers/api";
import { requireDocker } from "../helpers/docker";
import { requireBinary } from "../helpers/require";

const canRun = await requireBinary("redis-server", "apt-get install redis-server");
/** The tool turn runs `shell` in a Docker sandbox; without an engine only that test is skipped (never under CI). */
const docker = canRun ? await requireDocker() : null;

/** Both models served by the stack's mock (entries without base_url use MODEL_BASE_URL). */
const REGISTRY = JSON.stringify({
  default: "mock-model",
  models: [{ name: "mock-model", concurrency: 4 }, { name: "mock-json" }],
});

describe.skipIf(!canRun)("agents end to end (gateway + host)", () => {
  let stack: Stack;
  let api: ReturnType<typeof apiClient>;
  beforeAll(async () => {
    stack = await startStack({
      hosts: 1,
      modelRegistry: REGISTRY,
      hostEnv: { MODEL_RETRY_MAX: "50", MODEL_RETRY_BASE_MS: "20", MODEL_RETRY_MAX_DELAY_MS: "200" },
    });
    api = apiClient(stack.gatewayUrl, stack.apiKey);
  }, 180_000);
  afterAll(async () => {
    await stack?.stop();
  }, 60_000);

  const finished = (id: string) =>
    waitFor(
      `job ${id} to finish`,
      async () => {
        const { body } = await api.call<{ job: JobView }>("GET", `/v1/jobs/${id}`);
        return ["queued", "running"].includes(body.job.state) ? null : body.job;
      },
      { timeoutMs: 30_000, intervalMs: 100 },
    );

  it("runs an agent's instructions and sampling on the host, with the usage on the job view and in GET /v1/usage", async () => {
    const created = await api.call("POST", "/v1/agents", {
      name: "echoer",
      model: "mock-model",
      instructions: "You are the echoer, version one.",
      sampling: { temperature: 0.4 },
      limits: { max_output_tokens: 300 },
    });
    expect(created.status).toBe(201);
    const system = await api.call<{ job: JobView }>("POST", "/v1/jobs", {
      agent: "echoer",
      input: { messages: [{ role: "user", content: '!mock {"echo_system": true}' }] },
    });
    expect(system.status).toBe(202);
    const sampling = await api.call<{ job: JobView }>("POST", "/v1/jobs", {
      agent: "echoer@1",
      input: { messages: [{ role: "user", content: '!mock {"echo_sampling": true}' }] },
    });
    const a = await finished(system.body.job.id);
    expect({ state: a.state, output: a.output, agent: a.agent }).toEqual({
      state: "completed",
      output: "You are the echoer, version one.",
      agent: { name: "echoer", version: 1 },
    });
    const b = await finished(sampling.body.job.id);
    expect(JSON.parse(b.output ?? "")).toEqual({
      model: "mock-model",
      temperature: 0.4,
      top_p: null,
      max_tokens: 300,
    });
    for (const job of [a, b]) {
      expect(job.usage.model_calls).toBe(1);
      expect(job.usage.estimated).toBe(false);
      expect(job.usage.prompt_tokens).toBeGreaterThan(0);
      expect(job.usage.completion_tokens).toBeGreaterThan(0);
    }
    const today = new Date().toISOString().slice(0, 10);
    const usage = await api.call<{ usage: Array<{ model: string; prompt_tokens: number; model_calls: number }> }>(
      "GET",
      `/v1/usage?from=${today}&to=${today}`,
    );
    const row = usage.body.usage.find((u) => u.model === "mock-model");
    expect(row?.model_calls).toBeGreaterThanOrEqual(2);
    expect(row?.prompt_tokens).toBeGreaterThanOrEqual(a.usage.prompt_tokens + b.usage.prompt_tokens);
  });

  it("validates a response_format answer on the host: output_json on the view, a repair turn, output_invalid", async () => {
    const schema = {
      type: "object",
      properties: { verdict: { type: "string", enum: ["ship", "hold"] }, risk: { type: "integer", minimum: 0 } },
      required: ["verdict", "risk"],
    };
    expect(
      (await api.call("POST", "/v1/agents", { name: "judge", model: "mock-json", response_format: schema })).status,
    ).toBe(201);
    const submit = async (content: string) =>
      (
        await api.call<{ job: JobView }>("POST", "/v1/jobs", {
          agent: "judge",
          input: { messages: [{ role: "user", content }] },
        })
      ).body.job.id;
    const plain = await finished(await submit("should we ship?"));
    expect({ state: plain.state, json: plain.output_json, model: plain.model }).toEqual({
      state: "completed",
      json: { verdict: "ship", risk: 0 },
      model: "mock-json",
    });
    const repaired = await finished(
      await submit(`!mock ${JSON.stringify({ replies: ['{"verdict": "maybe"}', '{"verdict": "hold", "risk": 2}'] })}`),
    );
    expect({ state: repaired.state, json: repaired.output_json, calls: repaired.usage.model_calls }).toEqual({
      state: "completed",
      json: { verdict: "hold", risk: 2 },
      calls: 2,
    });
    const invalid = await finished(await submit(`!mock ${JSON.stringify({ replies: ["nope", "still nope"] })}`));
    expect({ state: invalid.state, code: invalid.error?.code, json: invalid.output_json }).toEqual({
      state: "failed",
      code: "output_invalid",
      json: null,
    });
  });

  it.runIf(docker)(
    "marks every model turn with model.turn: start, then tool_results, then repair, each turn's text after its mark",
    async () => {
      const schema = { type: "object", properties: { sentiment: { type: "string" } }, required: ["sentiment"] };
      const name = "turn-marker";
      expect(
        (await api.call("POST", "/v1/agents", { name, model: "mock-model", tools: ["shell"], response_format: schema }))
          .status,
      ).toBe(201);
      // Turn 1 calls shell; turn 2 (after its result) answers prose the schema rejects; turn 3 repairs.
      const script = {
        tool_calls: [{ name: "shell", args: { command: "echo checked" } }],
        replies: ["(unused: turn 1 calls the tool)", "I think it is positive", '{"sentiment": "positive"}'],
      };
      const { body } = await api.call<{ job: JobView }>("POST", "/v1/jobs", {
        agent: name,
        input: { messages: [{ role: "user", content: `!mock ${JSON.stringify(script)}` }] },
      });
      const job = await finished(body.job.id);
      expect({ state: job.state, output: job.output, json: job.output_json }, JSON.stringify(job.error)).toEqual({
        state: "completed",
        output: '{"sentiment": "positive"}',
        json: { sentiment: "positive" },
      });
      const events = (await api.events(body.job.id)).map((e) => ({
        type: e.event,
        payload: JSON.parse(e.data).payload,
      }));
      expect(events.filter((e) => e.type === "model.turn").map((e) => e.payload)).toEqual([
        { turn: 1, reason: "start" },
        { turn: 2, reason: "tool_results" },
        { turn: 3, reason: "repair" },
      ]);
      // Each mark comes before its turn's events: the tool call in turn 1, each answer's text in its own turn.
      const byTurn: Array<{ calls: string[]; text: string }> = [];
      for (const e of events) {
        if (e.type === "model.turn") byTurn.push({ calls: [], text: "" });
        else if (e.type === "tool.call") byTurn.at(-1)?.calls.push(e.payload.name);
        else if (e.type === "model.delta") {
          const turn = byTurn.at(-1);
          expect(turn, "a model.delta before any model.turn").toBeDefined();
          if (turn) turn.text += e.payload.text;
        }
      }
      expect(byTurn).toEqual([
        { calls: ["shell"], text: "" },
        { calls: [], text: "I think it is positive" },
        { calls: [], text: '{"sentiment": "positive"}' },
      ]);
      // After run.prepared, before the first model call's quota check (and after run.started, as ever).
      const types = events.map((e) => e.type);
      expect(types.indexOf("model.turn")).toBe(types.indexOf("run.prepared") + 1);
    },
  );

  it("streams a model.retry for a provider failure before output, then the answer", async () => {
    // The mock fails every request until told otherwise; the run retries under its backoff.
    const control = (rate: number) =>
      fetch(`${stack.modelUrl.replace(/\/v1$/, "")}/control`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({ fail_rate: rate }),
      });
    await control(1);
    const { body } = await api.call<{ job: JobView }>("POST", "/v1/jobs", {
      input: { messages: [{ role: "user", content: "retry me" }] },
    });
    const injected = async () =>
      Object.values((await stack.mockModel?.stats())?.injected_failures ?? {}).reduce((n, v) => n + v, 0);
    await waitFor("the run to have failed twice", async () => (await injected()) >= 2, {
      timeoutMs: 30_000,
      intervalMs: 10,
    });
    await control(0);
    const job = await finished(body.job.id);
    expect({ state: job.state, output: job.output }).toEqual({ state: "completed", output: "Echo: retry me" });
    const events = await api.events(body.job.id);
    const retries = events.filter((e) => e.event === "model.retry");
    expect(retries.length).toBeGreaterThanOrEqual(2);
    const first = JSON.parse(retries[0]?.data ?? "{}").payload;
    expect(first).toMatchObject({ attempt: 1, status: expect.any(Number) });
    expect(["rate_limited", "provider_error"]).toContain(first.reason);
  });
});
