/**
 * The host half of agents as data, against a second OpenAI-compatible provider started here
 * (test/helpers/fake-provider.ts records exactly what it received and scripts what it answers):
 * the job's pinned agent version reaches the provider as instructions, upstream model id,
 * sampling, max tokens and tool list; a later version does not reach a running job; usage is
 * recorded per call as the provider reported it (or estimated and marked); failures before
 * output are retried (Retry-After honoured, the quota slot given back meanwhile), failures after
 * output and 4xx are not; response_format answers are validated with one repair turn; and two
 * providers on one host keep their own concurrency limits. One in-process host, real Postgres,
 * redis-server behind the Upstash bridge, Docker for the sandbox (tools are offered only with one).
 */
import { randomUUID } from "node:crypto";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { and, eq } from "drizzle-orm";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type RunningHost, startHost } from "../../sandbox-host/host";
import { HostConfigSchema } from "../../sandbox-host/host-config";
import { silentLogger } from "../../sandbox-host/log";
import { hostModelsFromEnv } from "../../sandbox-host/model/provider-config";
import { createModelRouter } from "../../sandbox-host/model/router";
import { CHARS_PER_TOKEN } from "../../sandbox-host/runner/model-call";
import { type AgentDefinitionInput, AgentDefinitionSchema, agentModels } from "../../src/contracts/agent";
import type { EventEnvelope } from "../../src/contracts/events";
import { requestCancel } from "../../src/db/control-repo";
import * as schema from "../../src/db/schema";
import { toolNames } from "../../src/domain/approval";
import { redisKeys } from "../../src/quota/keys";
import { createRedisClient } from "../../src/quota/redis";
import { waitFor } from "../../tools/stack/services/ports";
import { spawnHost } from "../../tools/stack/start";
import type { TestDb } from "../helpers/db";
import { requireDocker } from "../helpers/docker";
import { type FakeProvider, type ProviderReply, startFakeProvider, textReply } from "../helpers/fake-provider";
import { type HostServices, startHostServices } from "../helpers/host-services";
import { sampleValue } from "../helpers/metrics";
import { requireBinary } from "../helpers/require";

const canRun =
  (await requireBinary("redis-server", "apt-get install redis-server")) && (await requireDocker()) !== null;

const TENANT = "t-agents";
const OTHER_TENANT = "t-agents-2";
const BRIDGE_TOKEN = "agents-host-bridge-token";
/** agent-model's registry prices, US dollars per million tokens (the other models have none). */
const PRICE_IN = 0.15;
const PRICE_OUT = 0.6;

let services: HostServices;
let t: TestDb;
let host: RunningHost;
/** The agents' provider, and two more with their own concurrency limits. */
let p1: FakeProvider;
let pa: FakeProvider;
let pb: FakeProvider;
let pc: FakeProvider;

if (canRun) {
  beforeAll(async () => {
    services = await startHostServices({ bridgeToken: BRIDGE_TOKEN });
    [p1, pa, pb, pc] = (await Promise.all([1, 2, 3, 4].map(() => startFakeProvider()))) as [
      FakeProvider,
      FakeProvider,
      FakeProvider,
      FakeProvider,
    ];
    t = await services.pgStack.freshDb(6);
    await t.db.insert(schema.tenants).values([
      { id: TENANT, name: "agents" },
      { id: OTHER_TENANT, name: "agents, too" },
    ]);
    const registry = {
      default: "agent-model",
      models: [
        {
          name: "agent-model",
          base_url: p1.url,
          api_key_env: "P1_KEY",
          upstream_model: "up-model-1",
          pricing: { input_usd_per_mtok: PRICE_IN, output_usd_per_mtok: PRICE_OUT },
        },
        // The same provider with a short timeout: a second client, for the timeout retry.
        { name: "impatient", base_url: p1.url, api_key_env: "P1_KEY", upstream_model: "up-model-1", timeout_ms: 400 },
        { name: "model-a", base_url: pa.url, api_key_env: "PA_KEY", upstream_model: "up-a", concurrency: 2 },
        { name: "model-b", base_url: pb.url, api_key_env: "PB_KEY", upstream_model: "up-b", concurrency: 4 },
        {
          name: "model-t",
          base_url: pc.url,
          api_key_env: "PC_KEY",
          concurrency: 10,
          tenant_concurrency: 1,
          tenant_limits: { [OTHER_TENANT]: 3 },
        },
      ],
    };
    const models = hostModelsFromEnv({
      MODEL_REGISTRY: JSON.stringify(registry),
      P1_KEY: "key-one",
      PA_KEY: "key-a",
      PB_KEY: "key-b",
      PC_KEY: "key-c",
    });
    const config = HostConfigSchema.parse({
      hostId: `agents-host-${randomUUID().slice(0, 8)}`,
      databaseUrl: t.url,
      redis: { url: services.bridge.url, token: BRIDGE_TOKEN },
      gatewayUrl: services.ingest.url,
      signingSecret: "agents-host-signing-secret-0123456789",
      heartbeatMs: 500,
      maxRuns: 24,
      shutdownGraceMs: 0,
      modelRetryBaseMs: 50,
      modelRetryBudgetMs: 40_000,
    });
    host = await startHost(config, { model: createModelRouter(models), models: models.catalog, log: silentLogger });
  }, 120_000);
  afterAll(async () => {
    await host?.close({ graceMs: 0 });
    await Promise.all([p1, pa, pb, pc].map((p) => p?.close()));
    await services?.stop();
  });
}

/** An agent with one version per definition given (versions 1, 2, …), as the gateway stores them. */
async function defineAgent(name: string, ...versions: AgentDefinitionInput[]): Promise<void> {
  await t.db.insert(schema.agents).values({ tenantId: TENANT, name, latestVersion: versions.length });
  for (const [i, v] of versions.entries()) await addVersion(name, i + 1, v);
}

async function addVersion(name: string, version: number, def: AgentDefinitionInput): Promise<void> {
  await t.db
    .insert(schema.agentVersions)
    .values({ tenantId: TENANT, name, version, definition: AgentDefinitionSchema.parse(def) });
  await t.db
    .update(schema.agents)
    .set({ latestVersion: version })
    .where(and(eq(schema.agents.tenantId, TENANT), eq(schema.agents.name, name)));
}

/** A job as the gateway writes one that names `agent@version`: the agent's model and tools copied on. */
async function submit(content: string, agent?: { name: string; version: number; def: AgentDefinitionInput }) {
  const id = randomUUID();
  const def = agent ? AgentDefinitionSchema.parse(agent.def) : null;
  await t.db.insert(schema.jobs).values({
    id,
    tenantId: TENANT,
    input: { messages: [{ role: "user", content }] },
    ...(agent && def
      ? { agentName: agent.name, agentVersion: agent.version, model: agentModels(def)[0], tools: toolNames(def.tools) }
      : { model: "agent-model" }),
  });
  return id;
}

async function ended(id: string, timeoutMs = 30_000) {
  return waitFor(
    `job ${id} to end`,
    async () => {
      const [row] = await t.db.select().from(schema.jobs).where(eq(schema.jobs.id, id));
      return row && !["queued", "running"].includes(row.state) ? row : null;
    },
    { timeoutMs, intervalMs: 25 },
  );
}

const eventsOf = (id: string): EventEnvelope[] => services.ingest.events.filter((e) => e.job_id === id);
/** The job's events of one type, once its terminal event has been delivered. */
async function deliveredEvents(id: string, type: string) {
  await waitFor(`job ${id}'s terminal event`, async () =>
    eventsOf(id).some((e) => ["run.completed", "run.failed", "run.cancelled"].includes(e.type)),
  );
  return eventsOf(id).filter((e) => e.type === type);
}

/** The requests of one job: each test's user message carries a marker the script matches on. */
const requestsWith = (p: FakeProvider, marker: string) =>
  p.requests.filter((r) => JSON.stringify(r.body.messages).includes(marker));

describe.skipIf(!canRun)("the job's agent, on the registry's providers", () => {
  it("sends the provider exactly the agent's instructions, upstream model id, key, sampling, max tokens and tools", async () => {
    const def = {
      model: "agent-model",
      instructions: "You are the release notes writer. Be brief.",
      tools: ["read_file", "shell"],
      limits: { max_turns: 3, max_output_tokens: 77 },
      sampling: { temperature: 0.3, top_p: 0.9 },
    } satisfies AgentDefinitionInput;
    await defineAgent("writer", def);
    p1.script = () => textReply("notes done");
    const id = await submit("exact-request marker", { name: "writer", version: 1, def });
    const row = await ended(id);
    expect({ state: row.state, output: row.output }).toEqual({ state: "completed", output: "notes done" });

    const [req, ...more] = requestsWith(p1, "exact-request marker");
    expect(more).toHaveLength(0);
    expect(req?.headers.authorization).toBe("Bearer key-one");
    const body = req?.body;
    expect(body.model).toBe("up-model-1");
    expect(body.messages).toEqual([
      { role: "system", content: "You are the release notes writer. Be brief." },
      { role: "user", content: "exact-request marker" },
    ]);
    expect({ temperature: body.temperature, top_p: body.top_p, max_tokens: body.max_tokens }).toEqual({
      temperature: 0.3,
      top_p: 0.9,
      max_tokens: 77,
    });
    expect(body.tools.map((tool: { function: { name: string } }) => tool.function.name)).toEqual([
      "read_file",
      "shell",
    ]);
    expect(body.response_format).toBeUndefined();
  });

  it("refuses a call of a sandbox tool the agent does not offer: a tool error the model reads, nothing run", async () => {
    const def = { model: "agent-model", tools: ["read_file"] } satisfies AgentDefinitionInput;
    await defineAgent("reader-only", def);
    p1.script = (_req, n) =>
      n === 1
        ? { kind: "stream", toolCalls: [{ id: "call-shell", name: "shell", args: { command: "echo pwned" } }] }
        : textReply("done");
    p1.reset();
    const id = await submit("not offered marker", { name: "reader-only", version: 1, def });
    const row = await ended(id);
    expect({ state: row.state, output: row.output }).toEqual({ state: "completed", output: "done" });
    const [result] = await deliveredEvents(id, "tool.result");
    expect(result?.payload).toMatchObject({ id: "call-shell", ok: false, output: { code: "invalid_input" } });
    expect(eventsOf(id).map((e) => e.type)).not.toContain("sandbox.created");
    const second = requestsWith(p1, "not offered marker")[1];
    expect(JSON.stringify(second?.body.messages.at(-1))).toContain("unknown tool");
  });

  it("keeps the version a run started with: a new version during the run does not reach its later turns", async () => {
    const v1 = { model: "agent-model", instructions: "INSTRUCTIONS ONE" } satisfies AgentDefinitionInput;
    await defineAgent("pinned", v1);
    let release!: () => void;
    const firstTurnHeld = new Promise<void>((r) => {
      release = r;
    });
    p1.script = (_req, n) =>
      n === 1 ? { kind: "stream", pieces: ["first"], until: firstTurnHeld } : textReply("second");
    p1.reset();
    const id = await submit("pinned marker", { name: "pinned", version: 1, def: v1 });
    await waitFor("turn 1 to reach the provider", async () => requestsWith(p1, "pinned marker").length === 1);
    // A new version is published and input arrives while turn 1 is still streaming: the input
    // makes a second turn; the new version must not.
    await addVersion("pinned", 2, { model: "agent-model", instructions: "INSTRUCTIONS TWO" });
    await t.db.insert(schema.jobInputs).values({ jobId: id, tenantId: TENANT, content: "and another thing" });
    release();
    const row = await ended(id);
    expect({ state: row.state, output: row.output }).toEqual({ state: "completed", output: "second" });
    const turns = requestsWith(p1, "pinned marker");
    expect(turns).toHaveLength(2);
    expect(turns.map((r) => r.body.messages[0])).toEqual([
      { role: "system", content: "INSTRUCTIONS ONE" },
      { role: "system", content: "INSTRUCTIONS ONE" },
    ]);
    expect(turns[1]?.body.messages.at(-1)).toEqual({ role: "user", content: "and another thing" });
    expect(JSON.stringify(turns)).not.toContain("INSTRUCTIONS TWO");
  });

  it("records every call's usage as the provider reported it: model_usage rows, the job's sums, the metrics", async () => {
    const before = {
      prompt:
        (await sampleValue(host.metricsUrl, "model_tokens_total", {
          model: "agent-model",
          kind: "prompt",
          estimated: "false",
        })) ?? 0,
      completion:
        (await sampleValue(host.metricsUrl, "model_tokens_total", {
          model: "agent-model",
          kind: "completion",
          estimated: "false",
        })) ?? 0,
      cost: (await sampleValue(host.metricsUrl, "model_cost_usd_total", { model: "agent-model", tenant: TENANT })) ?? 0,
    };
    let release!: () => void;
    const held = new Promise<void>((r) => {
      release = r;
    });
    p1.script = (_req, n) =>
      n === 1
        ? { kind: "stream", pieces: ["one"], until: held, usage: { prompt_tokens: 123, completion_tokens: 45 } }
        : { kind: "stream", pieces: ["two"], usage: { prompt_tokens: 210, completion_tokens: 9 } };
    p1.reset();
    const id = await submit("usage marker");
    await waitFor("turn 1 at the provider", async () => p1.requests.length === 1);
    await t.db.insert(schema.jobInputs).values({ jobId: id, tenantId: TENANT, content: "more" });
    release();
    const row = await ended(id);
    expect(row.state).toBe("completed");
    const usage = await t.db.select().from(schema.modelUsage).where(eq(schema.modelUsage.jobId, id));
    expect(
      usage
        .map((u) => ({
          model: u.model,
          prompt: u.promptTokens,
          completion: u.completionTokens,
          estimated: u.estimated,
          tenant: u.tenantId,
          execution: u.executionId,
        }))
        .sort((a, b) => a.prompt - b.prompt),
    ).toEqual([
      {
        model: "agent-model",
        prompt: 123,
        completion: 45,
        estimated: false,
        tenant: TENANT,
        execution: row.executionId,
      },
      {
        model: "agent-model",
        prompt: 210,
        completion: 9,
        estimated: false,
        tenant: TENANT,
        execution: row.executionId,
      },
    ]);
    expect({
      prompt: row.promptTokens,
      completion: row.completionTokens,
      calls: row.modelCalls,
      estimated: row.usageEstimated,
    }).toEqual({ prompt: 333, completion: 54, calls: 2, estimated: false });
    // Each row's cost is its tokens × the registry's prices, exact in numeric; the job's and the
    // tenant's day sum them.
    const costs = await t.pool.query<{ cost: string }>(
      "select trim_scale(cost_usd)::text as cost from model_usage where job_id = $1 order by prompt_tokens",
      [id],
    );
    expect(costs.rows.map((r) => r.cost)).toEqual(["0.00004545", "0.0000369"]);
    expect(Number(costs.rows[0]?.cost)).toBeCloseTo((123 * PRICE_IN + 45 * PRICE_OUT) / 1e6, 15);
    expect(row.costUsd).toBe(0.00008235);
    const spend = await t.pool.query<{ cost: string }>(
      "select cost_usd::text as cost from tenant_daily_spend where tenant_id = $1 and day = (now() at time zone 'UTC')::date",
      [TENANT],
    );
    expect(Number(spend.rows[0]?.cost)).toBeGreaterThanOrEqual(0.00008235);
    expect(
      (await sampleValue(host.metricsUrl, "model_cost_usd_total", { model: "agent-model", tenant: TENANT })) ?? 0,
    ).toBeCloseTo(before.cost + 0.00008235, 12);
    const labels = { model: "agent-model", estimated: "false" };
    expect(await sampleValue(host.metricsUrl, "model_tokens_total", { ...labels, kind: "prompt" })).toBe(
      before.prompt + 333,
    );
    expect(await sampleValue(host.metricsUrl, "model_tokens_total", { ...labels, kind: "completion" })).toBe(
      before.completion + 54,
    );
  });

  it("estimates usage (characters / 4) and marks it when the provider reports none", async () => {
    p1.script = () => ({ kind: "stream", pieces: ["twelve chars"], usage: null });
    p1.reset();
    const id = await submit("no usage marker, please estimate");
    const row = await ended(id);
    expect(row.state).toBe("completed");
    const sent = p1.requests[0]?.body.messages as Array<{ content: string }>;
    const promptChars = sent.reduce((n, m) => n + m.content.length, 0);
    const [u] = await t.db.select().from(schema.modelUsage).where(eq(schema.modelUsage.jobId, id));
    expect({ prompt: u?.promptTokens, completion: u?.completionTokens, estimated: u?.estimated }).toEqual({
      prompt: Math.ceil(promptChars / CHARS_PER_TOKEN),
      completion: Math.ceil("twelve chars".length / CHARS_PER_TOKEN),
      estimated: true,
    });
    expect({ estimated: row.usageEstimated, calls: row.modelCalls, prompt: row.promptTokens }).toEqual({
      estimated: true,
      calls: 1,
      prompt: u?.promptTokens,
    });
  });
});

describe.skipIf(!canRun)("the tenant's daily budget on a running job", () => {
  it("a budget spent during turn 1 fails the run budget_exceeded before turn 2's call; the call in flight is billed", async () => {
    let release!: () => void;
    const held = new Promise<void>((r) => {
      release = r;
    });
    p1.script = (_req, n) =>
      n === 1
        ? { kind: "stream", pieces: ["one"], until: held, usage: { prompt_tokens: 1000, completion_tokens: 100 } }
        : { kind: "stream", pieces: ["two"], usage: { prompt_tokens: 1, completion_tokens: 1 } };
    p1.reset();
    const id = await submit("budget marker");
    await waitFor("turn 1 at the provider", async () => p1.requests.length === 1);
    // A budget just above what the tenant spent so far: turn 1's call (0.00021 $) passes it.
    const spent = await t.pool.query<{ cost: string | null }>(
      "select cost_usd::text as cost from tenant_daily_spend where tenant_id = $1 and day = (now() at time zone 'UTC')::date",
      [TENANT],
    );
    const budget = Number(spent.rows[0]?.cost ?? 0) + 0.0001;
    await t.pool.query("update tenants set daily_budget_usd = $2 where id = $1", [TENANT, budget]);
    try {
      await t.db.insert(schema.jobInputs).values({ jobId: id, tenantId: TENANT, content: "more" });
      release();
      const row = await ended(id);
      expect(row.state).toBe("failed");
      expect(row.error?.code).toBe("budget_exceeded");
      expect(row.error?.message).toMatch(/daily budget of \$/);
      // Turn 2 never reached the provider; turn 1, in flight when the budget ran out, is billed.
      expect(p1.requests.length).toBe(1);
      expect(row.modelCalls).toBe(1);
      expect(row.costUsd).toBeCloseTo((1000 * PRICE_IN + 100 * PRICE_OUT) / 1e6, 15);
      expect(row.output).toBe("one");
    } finally {
      await t.pool.query("update tenants set daily_budget_usd = null where id = $1", [TENANT]);
    }
  });

  it("a job that starts with the budget already spent fails budget_exceeded before its first call", async () => {
    p1.script = () => ({ kind: "stream", pieces: ["never"], usage: { prompt_tokens: 1, completion_tokens: 1 } });
    p1.reset();
    // A budget of 0 is spent by definition: the operator's way to stop a tenant's spend.
    await t.pool.query("update tenants set daily_budget_usd = 0 where id = $1", [TENANT]);
    try {
      const row = await ended(await submit("budget already spent"));
      expect(row.state).toBe("failed");
      expect(row.error?.code).toBe("budget_exceeded");
      expect(p1.requests.length).toBe(0);
      expect(row.modelCalls).toBe(0);
    } finally {
      await t.pool.query("update tenants set daily_budget_usd = null where id = $1", [TENANT]);
    }
  });
});

describe.skipIf(!canRun)("provider errors, handled like a careful client", () => {
  it("retries a 429 after its Retry-After, with the quota slot given back meanwhile: one model.retry", async () => {
    p1.script = (_req, n) =>
      n === 1
        ? { kind: "error", status: 429, message: "slow down", headers: { "retry-after": "1" } }
        : textReply("after the wait");
    p1.reset();
    const id = await submit("retry-after marker");
    await waitFor("the 429 to be answered", async () => p1.requests.length === 1);
    // During the backoff the run holds no quota slot.
    await waitFor(
      "the slot to be given back",
      async () => (await sampleValue(host.metricsUrl, "quota_leases_held")) === 0,
    );
    expect(p1.requests).toHaveLength(1);
    const row = await ended(id);
    expect({ state: row.state, output: row.output }).toEqual({ state: "completed", output: "after the wait" });
    const [first, second] = p1.requests;
    expect((second?.at ?? 0) - (first?.at ?? 0)).toBeGreaterThanOrEqual(950);
    const retries = await deliveredEvents(id, "model.retry");
    expect(retries.map((e) => e.payload)).toEqual([
      { attempt: 1, delay_ms: 1000, reason: "rate_limited", status: 429 },
    ]);
    // Rejected calls cost nothing: only the served call is recorded.
    expect(row.modelCalls).toBe(1);
  });

  it("retries a call whose provider went silent before any output (timeout), then completes", async () => {
    p1.script = (_req, n) => (n === 1 ? { kind: "stream", pieces: ["too late"], holdMs: 3000 } : textReply("in time"));
    p1.reset();
    const id = randomUUID();
    await t.db.insert(schema.jobs).values({
      id,
      tenantId: TENANT,
      model: "impatient",
      input: { messages: [{ role: "user", content: "timeout marker" }] },
    });
    const row = await ended(id);
    expect({ state: row.state, output: row.output }).toEqual({ state: "completed", output: "in time" });
    expect(p1.requests).toHaveLength(2);
    const retries = await deliveredEvents(id, "model.retry");
    expect(retries.map((e) => e.payload)).toEqual([
      { attempt: 1, delay_ms: expect.any(Number), reason: "network_error", status: null },
    ]);
    // Nothing of the silent attempt reached the stream.
    const deltas = await deliveredEvents(id, "model.delta");
    expect(deltas.map((e) => (e.payload as { text: string }).text).join("")).toBe("in time");
  });

  it("fails provider_error when the stream breaks after output, without retrying or repeating deltas", async () => {
    p1.script = () => ({ kind: "stream", pieces: ["alpha ", "beta ", "gamma ", "delta"], cutAfter: 3 });
    p1.reset();
    const id = await submit("cut marker");
    const row = await ended(id);
    expect({ state: row.state, code: row.error?.code }).toEqual({ state: "failed", code: "provider_error" });
    expect(row.output).toBe("alpha beta gamma ");
    expect(p1.requests).toHaveLength(1);
    const deltas = await deliveredEvents(id, "model.delta");
    expect(deltas.map((e) => (e.payload as { text: string }).text).join("")).toBe("alpha beta gamma ");
    expect(await deliveredEvents(id, "model.retry")).toEqual([]);
    // The partial call was served: its tokens are estimated and recorded.
    expect({ calls: row.modelCalls, estimated: row.usageEstimated }).toEqual({ calls: 1, estimated: true });
  });

  it("fails a 400 at once, with the provider's message made safe (no URL, key or internal host)", async () => {
    p1.script = () => ({
      kind: "error",
      status: 400,
      message:
        "Invalid value for 'max_tokens': too large. See https://internal.example.com/docs (key sk-proj-abcdefghijklmnop1234, upstream vllm-0.inference.svc.cluster.local:8000)",
    });
    p1.reset();
    const id = await submit("bad request marker");
    const row = await ended(id);
    expect({ state: row.state, code: row.error?.code }).toEqual({ state: "failed", code: "provider_error" });
    expect(p1.requests).toHaveLength(1);
    expect(row.error?.message).toContain("Invalid value for 'max_tokens': too large.");
    expect(row.error?.message).not.toMatch(/https?:|sk-proj|example\.com|cluster\.local|8000/);
    expect(await deliveredEvents(id, "model.retry")).toEqual([]);
  });

  it("ends a run cancelled during a backoff promptly, without waiting the backoff out", async () => {
    p1.script = () => ({ kind: "error", status: 503, message: "overloaded", headers: { "retry-after": "30" } });
    p1.reset();
    const id = await submit("cancel in backoff marker");
    await waitFor("the model.retry event", async () => eventsOf(id).some((e) => e.type === "model.retry"));
    const asked = Date.now();
    expect(await requestCancel(t.db, TENANT, id)).toBe("requested");
    await createRedisClient({ url: services.bridge.url, token: BRIDGE_TOKEN }).set(redisKeys().cancelHint(id), "1", {
      ex: 60,
    });
    const row = await ended(id, 10_000);
    expect(row.state).toBe("cancelled");
    expect(Date.now() - asked).toBeLessThan(5000);
    expect(p1.requests).toHaveLength(1);
  });
});

describe.skipIf(!canRun)("response_format: the answer validated, one repair turn", () => {
  const schemaDef = {
    type: "object",
    properties: { title: { type: "string" }, score: { type: "integer", minimum: 0 } },
    required: ["title", "score"],
    additionalProperties: false,
  };
  const def = { model: "agent-model", response_format: schemaDef } satisfies AgentDefinitionInput;
  beforeAll(async () => {
    if (canRun) await defineAgent("structured", def);
  });
  const scripted =
    (...answers: string[]) =>
    (_req: unknown, n: number): ProviderReply =>
      textReply(answers[Math.min(n, answers.length) - 1] as string);

  it("stores a valid answer as output_json, and asks the provider for the schema", async () => {
    p1.script = scripted('{"title": "ok", "score": 3}');
    p1.reset();
    const id = await submit("valid json marker", { name: "structured", version: 1, def });
    const row = await ended(id);
    expect({ state: row.state, json: row.outputJson }).toEqual({ state: "completed", json: { title: "ok", score: 3 } });
    expect(p1.requests).toHaveLength(1);
    expect(p1.requests[0]?.body.response_format).toEqual({
      type: "json_schema",
      json_schema: { name: "structured", schema: schemaDef },
    });
  });

  it("gives an invalid answer one repair turn that says what was wrong; valid then → completed", async () => {
    p1.script = scripted('{"title": "ok", "score": -1}', '{"title": "ok", "score": 1}');
    p1.reset();
    const id = await submit("repair marker", { name: "structured", version: 1, def });
    const row = await ended(id);
    expect({ state: row.state, json: row.outputJson }).toEqual({ state: "completed", json: { title: "ok", score: 1 } });
    expect(p1.requests).toHaveLength(2);
    const repair = p1.requests[1]?.body.messages.at(-1);
    expect(repair.role).toBe("user");
    expect(repair.content).toMatch(/does not satisfy the required JSON Schema: score: /);
  });

  it("fails output_invalid when the repaired answer is still invalid", async () => {
    p1.script = scripted("not json at all", '{"title": 5}');
    p1.reset();
    const id = await submit("invalid twice marker", { name: "structured", version: 1, def });
    const row = await ended(id);
    expect({ state: row.state, code: row.error?.code, json: row.outputJson }).toEqual({
      state: "failed",
      code: "output_invalid",
      json: null,
    });
    expect(row.error?.message).toMatch(/even after a repair turn/);
    expect(p1.requests).toHaveLength(2);
  });
});

describe.skipIf(!canRun)("two providers on one host", () => {
  it("keeps each model's own concurrency limit under load (2 and 4)", async () => {
    // Each answer is held until its provider has seen its limit's worth at once (or 15 s), so the
    // peak does not depend on how fast a loaded machine starts the runs; past the limit it shows.
    const peakReached = (p: FakeProvider, limit: number) =>
      waitFor("the provider's peak", async () => p.maxInFlight >= limit, { timeoutMs: 15_000, intervalMs: 10 }).catch(
        () => {},
      );
    for (const [p, limit] of [
      [pa, 2],
      [pb, 4],
    ] as const) {
      p.reset();
      p.script = () => ({ kind: "stream", pieces: ["done"], holdMs: 100, until: peakReached(p, limit) });
    }
    const ids: string[] = [];
    for (let i = 0; i < 10; i++) {
      for (const model of ["model-a", "model-b"]) {
        const id = randomUUID();
        await t.db
          .insert(schema.jobs)
          .values({ id, tenantId: TENANT, model, input: { messages: [{ role: "user", content: `load ${i}` }] } });
        ids.push(id);
      }
    }
    const rows = await Promise.all(ids.map((id) => ended(id, 60_000)));
    expect(rows.filter((r) => r.state === "completed")).toHaveLength(20);
    expect({ a: pa.requests.length, b: pb.requests.length }).toEqual({ a: 10, b: 10 });
    expect(new Set(pa.requests.map((r) => r.body.model))).toEqual(new Set(["up-a"]));
    expect(new Set(pb.requests.map((r) => r.body.model))).toEqual(new Set(["up-b"]));
    expect({ a: pa.maxInFlight, b: pb.maxInFlight }).toEqual({ a: 2, b: 4 });
  }, 90_000);

  it("keeps a model's per-tenant limit (tenant_concurrency 1, one tenant's override 3) apart from its global one", async () => {
    pc.classify = (req) => (JSON.stringify(req.body.messages).includes(OTHER_TENANT) ? OTHER_TENANT : TENANT);
    pc.reset();
    const peaksReached = waitFor(
      "both tenants' peaks",
      async () => (pc.peakBy.get(TENANT) ?? 0) >= 1 && (pc.peakBy.get(OTHER_TENANT) ?? 0) >= 3,
      { timeoutMs: 15_000, intervalMs: 10 },
    ).catch(() => {});
    pc.script = () => ({ kind: "stream", pieces: ["done"], holdMs: 100, until: peaksReached });
    const ids: string[] = [];
    for (let i = 0; i < 6; i++) {
      for (const tenantId of [TENANT, OTHER_TENANT]) {
        const id = randomUUID();
        await t.db.insert(schema.jobs).values({
          id,
          tenantId,
          model: "model-t",
          input: { messages: [{ role: "user", content: `per-tenant ${tenantId} ${i}` }] },
        });
        ids.push(id);
      }
    }
    const rows = await Promise.all(ids.map((id) => ended(id, 60_000)));
    expect(rows.filter((r) => r.state === "completed")).toHaveLength(12);
    expect(Object.fromEntries(pc.peakBy)).toEqual({ [TENANT]: 1, [OTHER_TENANT]: 3 });
  }, 90_000);
});

describe.skipIf(!canRun)("usage survives the host", () => {
  it("a host SIGKILLed mid-run has already recorded every call that ended (its registry read from MODEL_REGISTRY_FILE)", async () => {
    // Its own database, so the suite's in-process host never sees this job.
    const db = await services.pgStack.freshDb(2);
    await db.db.insert(schema.tenants).values({ id: TENANT, name: "agents" });
    const dir = await mkdtemp(join(tmpdir(), "ear-registry-"));
    const file = join(dir, "models.json");
    await writeFile(
      file,
      JSON.stringify({
        models: [{ name: "agent-model", base_url: p1.url, api_key_env: "KILLED_HOST_KEY", upstream_model: "up-kill" }],
      }),
    );
    let releaseFirst!: () => void;
    const first = new Promise<void>((r) => {
      releaseFirst = r;
    });
    p1.reset();
    p1.script = (_req, n) =>
      n === 1
        ? { kind: "stream", pieces: ["first"], until: first, usage: { prompt_tokens: 41, completion_tokens: 3 } }
        : { kind: "stream", pieces: ["never"], until: new Promise(() => {}) };
    const host = await spawnHost(resolve(import.meta.dirname, "../.."), {
      DATABASE_URL: db.url,
      UPSTASH_REDIS_REST_URL: services.bridge.url,
      UPSTASH_REDIS_REST_TOKEN: BRIDGE_TOKEN,
      GATEWAY_URL: services.ingest.url,
      INTERNAL_SIGNING_SECRET: "agents-host-signing-secret-0123456789",
      MODEL_REGISTRY_FILE: file,
      KILLED_HOST_KEY: "key-killed",
      HOST_METRICS_PORT: "0",
      SANDBOX_ENABLED: "false",
    });
    try {
      const id = randomUUID();
      await db.db
        .insert(schema.jobs)
        .values({ id, tenantId: TENANT, input: { messages: [{ role: "user", content: "killed host marker" }] } });
      await waitFor("turn 1 at the provider", async () => p1.requests.length === 1, { timeoutMs: 30_000 });
      // Input during turn 1 makes a turn 2, which the provider never answers.
      await db.db.insert(schema.jobInputs).values({ jobId: id, tenantId: TENANT, content: "go on" });
      releaseFirst();
      await waitFor("turn 2 at the provider", async () => p1.requests.length === 2, { timeoutMs: 30_000 });
      process.kill(-(host.process.pid as number), "SIGKILL");
      await new Promise((r) => host.process.once("exit", r));

      expect(p1.requests.map((r) => [r.body.model, r.headers.authorization])).toEqual([
        ["up-kill", "Bearer key-killed"],
        ["up-kill", "Bearer key-killed"],
      ]);
      const usage = await db.db.select().from(schema.modelUsage).where(eq(schema.modelUsage.jobId, id));
      expect(usage.map((u) => [u.model, u.promptTokens, u.completionTokens, u.estimated])).toEqual([
        ["agent-model", 41, 3, false],
      ]);
      const [row] = await db.db.select().from(schema.jobs).where(eq(schema.jobs.id, id));
      expect({
        state: row?.state,
        prompt: row?.promptTokens,
        completion: row?.completionTokens,
        calls: row?.modelCalls,
      }).toEqual({ state: "running", prompt: 41, completion: 3, calls: 1 });
    } finally {
      await host.stop().catch(() => {});
      await rm(dir, { recursive: true, force: true });
    }
  }, 90_000);

  it("a host whose registry names an unset key variable refuses to start, naming it", async () => {
    const started = spawnHost(resolve(import.meta.dirname, "../.."), {
      DATABASE_URL: t.url,
      UPSTASH_REDIS_REST_URL: services.bridge.url,
      UPSTASH_REDIS_REST_TOKEN: BRIDGE_TOKEN,
      GATEWAY_URL: services.ingest.url,
      INTERNAL_SIGNING_SECRET: "agents-host-signing-secret-0123456789",
      MODEL_REGISTRY: JSON.stringify({
        models: [{ name: "m", base_url: p1.url, api_key_env: "NOT_SET_ANYWHERE_KEY" }],
      }),
      HOST_METRICS_PORT: "0",
      SANDBOX_ENABLED: "false",
    });
    await expect(started).rejects.toThrow(
      /exited \(2\)[\s\S]*NOT_SET_ANYWHERE_KEY \(the key of model "m"\) is not set/,
    );
  }, 60_000);
});
