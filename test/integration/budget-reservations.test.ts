/**
 * Budgets reserved before each call (docs/quota.md, "Budgets: reserve, then settle") on a real
 * in-process host, Postgres and Redis behind the Upstash bridge, against a provider of the
 * test's own with prices in the registry: a hostile tenant's 40 concurrent jobs under a $0.01
 * daily budget spend at most the documented bound (budget + one call's reservation), the Redis
 * counter equals the ledger (nothing counted twice), and no reservation is left behind.
 */
import { randomUUID } from "node:crypto";
import { resolve } from "node:path";
import { eq } from "drizzle-orm";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type RunningHost, startHost } from "../../sandbox-host/host";
import { HostConfigSchema } from "../../sandbox-host/host-config";
import { silentLogger } from "../../sandbox-host/log";
import { hostModelsFromEnv } from "../../sandbox-host/model/provider-config";
import { createModelRouter } from "../../sandbox-host/model/router";
import { loadQuotaScripts } from "../../sandbox-host/quota/load-scripts";
import { callCostUsd, estimateUsage } from "../../sandbox-host/runner/model-call";
import { AgentDefinitionSchema } from "../../src/contracts/agent";
import * as schema from "../../src/db/schema";
import { budgetKeys, redisKeys } from "../../src/quota/keys";
import { createLeaseStore } from "../../src/quota/lease-store";
import { createRedisClient } from "../../src/quota/redis";
import { waitFor } from "../../tools/stack/services/ports";
import { spawnHost } from "../../tools/stack/start";
import type { TestDb } from "../helpers/db";
import { type FakeProvider, startFakeProvider } from "../helpers/fake-provider";
import { type HostServices, startHostServices } from "../helpers/host-services";
import { sampleValue } from "../helpers/metrics";
import { requireBinary } from "../helpers/require";

const canRun = await requireBinary("redis-server", "apt-get install redis-server");
const ROOT = resolve(import.meta.dirname, "../..");

const TENANT = "t-budget";
const BRIDGE_TOKEN = "budget-bridge-token";
/** US dollars per million tokens. */
const PRICING = { inputUsdPerMtok: 1, outputUsdPerMtok: 2 };
/** What every job asks for: the hostile tenant's 2,000 tokens, sent as the call's bound. */
const MAX_OUTPUT = 2000;
const BUDGET_USD = 0.01;
const JOBS = 40;
/** The user message (400 characters: the host's estimate is 100 prompt tokens). */
const CONTENT = "spend ".repeat(66).padEnd(400, "x");

let services: HostServices;
let t: TestDb;
let host: RunningHost;
let provider: FakeProvider;

if (canRun) {
  beforeAll(async () => {
    services = await startHostServices({ bridgeToken: BRIDGE_TOKEN });
    provider = await startFakeProvider();
    t = await services.pgStack.freshDb(6);
    await t.db.insert(schema.tenants).values({ id: TENANT, name: "budget" });
    const models = hostModelsFromEnv({ MODEL_REGISTRY: registry(), P_KEY: "key" });
    const config = HostConfigSchema.parse({
      hostId: `budget-host-${randomUUID().slice(0, 8)}`,
      databaseUrl: t.url,
      redis: { url: services.bridge.url, token: BRIDGE_TOKEN },
      gatewayUrl: services.ingest.url,
      signingSecret: "budget-host-signing-secret-0123456789",
      heartbeatMs: 1000,
      maxRuns: JOBS,
      sandboxEnabled: false,
      shutdownGraceMs: 0,
      modelMaxOutputTokens: MAX_OUTPUT,
    });
    host = await startHost(config, {
      model: createModelRouter(models),
      models: models.catalog,
      log: silentLogger,
      sandbox: null,
    });
  }, 120_000);
  afterAll(async () => {
    await host?.close({ graceMs: 0 });
    await provider?.close();
    await services?.stop();
  });
}

/** The operator's registry: one model on the test's provider, priced. */
const registry = () =>
  JSON.stringify({
    default: "priced",
    models: [
      {
        name: "priced",
        base_url: provider.url,
        api_key_env: "P_KEY",
        upstream_model: "up-priced",
        pricing: { input_usd_per_mtok: PRICING.inputUsdPerMtok, output_usd_per_mtok: PRICING.outputUsdPerMtok },
      },
    ],
  });

async function ended(id: string, timeoutMs = 60_000) {
  return waitFor(
    `job ${id} to end`,
    async () => {
      const [row] = await t.db.select().from(schema.jobs).where(eq(schema.jobs.id, id));
      return row && !["queued", "running"].includes(row.state) ? row : null;
    },
    { timeoutMs, intervalMs: 50 },
  );
}

describe.skipIf(!canRun)("budgets reserved before each call", () => {
  it("40 concurrent jobs under a $0.01 daily budget spend at most the budget plus one call's reservation", {
    timeout: 120_000,
  }, async () => {
    // Each call streams its whole bound (2,000 tokens) after a hold, so every job is in flight at once.
    provider.script = () => ({
      kind: "stream",
      pieces: ["long answer"],
      holdMs: 400,
      usage: { prompt_tokens: 90, completion_tokens: MAX_OUTPUT },
    });
    provider.reset();
    await t.pool.query("update tenants set daily_budget_usd = $2 where id = $1", [TENANT, BUDGET_USD]);
    const ids = Array.from({ length: JOBS }, () => randomUUID());
    await t.db.insert(schema.jobs).values(
      ids.map((id) => ({
        id,
        tenantId: TENANT,
        input: { messages: [{ role: "user" as const, content: CONTENT }] },
        model: "priced",
      })),
    );
    const rows = await Promise.all(ids.map((id) => ended(id)));

    // What one call reserves: the prompt as the host counts it, plus the bound, priced.
    const promptEstimate = estimateUsage(
      { messages: [{ role: "user", content: CONTENT }], model: "priced", tools: undefined },
      "",
      [],
    ).promptTokens;
    expect(promptEstimate).toBe(100);
    const reservation = callCostUsd({ promptTokens: promptEstimate, completionTokens: MAX_OUTPUT }, PRICING);
    const perCall = callCostUsd({ promptTokens: 90, completionTokens: MAX_OUTPUT }, PRICING);

    const spent = await t.pool.query<{ cost: string }>(
      "select coalesce(sum(cost_usd), 0)::text as cost from model_usage where tenant_id = $1",
      [TENANT],
    );
    const spentUsd = Number(spent.rows[0]?.cost);
    const completed = rows.filter((r) => r.state === "completed");
    const refused = rows.filter((r) => r.state === "failed" && r.error?.code === "budget_exceeded");
    // Every call asked for is in the ledger; the ones refused never reached the provider.
    expect(completed.length + refused.length).toBe(JOBS);
    // A call stopped by a lost lease before its first token (this loaded host: 40 runs at once on
    // a shared 2-core VM) is asked again under a new lease and reservation: more requests than answers.
    expect(provider.requests.length).toBeGreaterThanOrEqual(completed.length);
    expect(provider.requests.every((r) => r.body.max_tokens === MAX_OUTPUT)).toBe(true);
    // Each answer is billed; a call stopped by a lost lease after its first token is billed too
    // (estimated), so the ledger holds at least the answers.
    expect(spentUsd).toBeGreaterThanOrEqual(completed.length * perCall - 1e-12);
    // The documented bound (docs/quota.md): the budget, passed by at most one call's reservation.
    expect(spentUsd).toBeLessThanOrEqual(BUDGET_USD + reservation);
    // Admitted while spend + reservations < budget: 0, 1, 2 reservations in flight → 3 calls.
    expect(completed.length).toBeGreaterThan(0);
    expect(completed.length).toBeLessThanOrEqual(Math.ceil(BUDGET_USD / reservation));
    expect(refused[0]?.error?.message).toMatch(
      /daily budget of \$0\.01 \(UTC day\).*reserved by model calls in flight/,
    );
    // Nothing counted twice: the Redis counter is the ledger's figure, and no reservation is left.
    const keys = redisKeys();
    const day = new Date().toISOString().slice(0, 10);
    const budgetKey = budgetKeys.tenantDay(TENANT, day);
    const redis = createRedisClient({ url: services.bridge.url, token: BRIDGE_TOKEN });
    expect(Number(await redis.get(keys.budgetSpent(budgetKey)))).toBe(Math.round(spentUsd * 1e9));
    expect(await redis.zcard(keys.budgetReservations(budgetKey))).toBe(0);
    const ledger = await t.pool.query<{ cost: string }>(
      "select cost_usd::text as cost from tenant_daily_spend where tenant_id = $1 and day = (now() at time zone 'UTC')::date",
      [TENANT],
    );
    expect(Number(ledger.rows[0]?.cost)).toBeCloseTo(spentUsd, 12);
    // /metrics: every admitted call (and each retry of one) reserved, and settled once each;
    // the rest were refused by a reservation or by the ledger's read at their start. (Once, 44
    // refusals were counted for 37 refused jobs: not explained yet, so no upper bound is asserted.)
    const reserved = (await sampleValue(host.metricsUrl, "budget_reservations_total", { outcome: "reserved" })) ?? 0;
    const settled = (await sampleValue(host.metricsUrl, "budget_settlements_total", { outcome: "counted" })) ?? 0;
    // A lease that ran out before its call was sent (an acquire answered late) reserved too.
    expect(reserved).toBeGreaterThanOrEqual(provider.requests.length);
    expect(settled).toBe(reserved);
    expect(await sampleValue(host.metricsUrl, "budget_settlements_total", { outcome: "repeated" })).toBeFalsy();
    const refusedByRedis =
      (await sampleValue(host.metricsUrl, "budget_reservations_total", { outcome: "refused" })) ?? 0;
    expect(refusedByRedis).toBeGreaterThan(0);
  });

  it("an agent's limits.max_cost_usd bounds its job's tree: turn 2 is refused before its call once turn 1 spent it", {
    timeout: 60_000,
  }, async () => {
    await t.pool.query("update tenants set daily_budget_usd = null where id = $1", [TENANT]);
    // One call reserves $0.0041 (100 prompt + 2,000 output tokens): under a $0.004 limit only the first is admitted.
    const def = AgentDefinitionSchema.parse({ model: "priced", limits: { max_cost_usd: 0.004 } });
    await t.db.insert(schema.agents).values({ tenantId: TENANT, name: "capped", latestVersion: 1 });
    await t.db.insert(schema.agentVersions).values({ tenantId: TENANT, name: "capped", version: 1, definition: def });
    let release!: () => void;
    const held = new Promise<void>((r) => {
      release = r;
    });
    provider.reset();
    provider.script = (_req, n) =>
      n === 1
        ? { kind: "stream", pieces: ["one"], until: held, usage: { prompt_tokens: 90, completion_tokens: MAX_OUTPUT } }
        : { kind: "stream", pieces: ["two"], usage: { prompt_tokens: 1, completion_tokens: 1 } };
    const id = randomUUID();
    await t.db.insert(schema.jobs).values({
      id,
      tenantId: TENANT,
      input: { messages: [{ role: "user", content: CONTENT }] },
      agentName: "capped",
      agentVersion: 1,
      model: "priced",
    });
    await waitFor("turn 1 at the provider", async () => provider.requests.length === 1);
    // Input during turn 1 makes a turn 2.
    await t.db.insert(schema.jobInputs).values({ jobId: id, tenantId: TENANT, content: "more" });
    release();
    const row = await ended(id);
    expect({ state: row.state, code: row.error?.code, output: row.output }).toEqual({
      state: "failed",
      code: "budget_exceeded",
      output: "one",
    });
    expect(row.error?.message).toMatch(/tree spent \$0\.00409 of its limit of \$0\.004 \(limits\.max_cost_usd\)/);
    expect(provider.requests.length).toBe(1);
    expect(row.costUsd).toBeCloseTo(callCostUsd({ promptTokens: 90, completionTokens: MAX_OUTPUT }, PRICING), 12);
    const redis = createRedisClient({ url: services.bridge.url, token: BRIDGE_TOKEN });
    expect(Number(await redis.get(redisKeys().budgetSpent(budgetKeys.tree(id))))).toBe(4_090_000);
  });

  it("a SIGKILLed host's reservations expire like its leases, and its recovered runs count each call once", {
    timeout: 120_000,
  }, async () => {
    // Its own database, so the in-process host above never claims these jobs.
    const db = await services.pgStack.freshDb(4);
    const tenant = "t-kill";
    await db.db.insert(schema.tenants).values({ id: tenant, name: "kill", dailyBudgetUsd: 1 });
    provider.reset();
    // The killed host's three calls hang before any output; every later call answers.
    provider.script = (_req, n) =>
      n <= 3
        ? { kind: "stream", pieces: ["never"], until: new Promise(() => {}) }
        : { kind: "stream", pieces: ["done"], usage: { prompt_tokens: 90, completion_tokens: 50 } };
    const heartbeatMs = 500;
    const env = {
      DATABASE_URL: db.url,
      UPSTASH_REDIS_REST_URL: services.bridge.url,
      UPSTASH_REDIS_REST_TOKEN: BRIDGE_TOKEN,
      GATEWAY_URL: services.ingest.url,
      INTERNAL_SIGNING_SECRET: "budget-host-signing-secret-0123456789",
      MODEL_REGISTRY: registry(),
      P_KEY: "key",
      MODEL_MAX_OUTPUT_TOKENS: String(MAX_OUTPUT),
      HOST_METRICS_PORT: "0",
      SANDBOX_ENABLED: "false",
      HOST_HEARTBEAT_MS: String(heartbeatMs),
      HOST_RUN_LOST_AFTER_MS: "3000",
      HOST_REAP_MS: "300",
      HOST_SHUTDOWN_GRACE_MS: "0",
    };
    const keys = redisKeys();
    const budgetKey = budgetKeys.tenantDay(tenant, new Date().toISOString().slice(0, 10));
    const redis = createRedisClient({ url: services.bridge.url, token: BRIDGE_TOKEN });
    const killed = await spawnHost(ROOT, env);
    let survivor: Awaited<ReturnType<typeof spawnHost>> | undefined;
    try {
      const ids = Array.from({ length: 3 }, () => randomUUID());
      await db.db.insert(schema.jobs).values(
        ids.map((id) => ({
          id,
          tenantId: tenant,
          input: { messages: [{ role: "user" as const, content: CONTENT }] },
          model: "priced",
        })),
      );
      await waitFor("three calls in flight", async () => provider.inFlight === 3, { timeoutMs: 30_000 });
      expect(await redis.zcard(keys.budgetReservations(budgetKey))).toBe(3);
      process.kill(-(killed.process.pid as number), "SIGKILL");
      await new Promise((r) => killed.process.once("exit", r));

      // Another host recovers the runs (the job journal): each asks its turn again and completes.
      survivor = await spawnHost(ROOT, env);
      const rows = await Promise.all(
        ids.map((id) =>
          waitFor(
            `job ${id} to end`,
            async () => {
              const [row] = await db.db.select().from(schema.jobs).where(eq(schema.jobs.id, id));
              return row && !["queued", "running"].includes(row.state) ? row : null;
            },
            { timeoutMs: 60_000, intervalMs: 100 },
          ),
        ),
      );
      expect(rows.map((r) => r.state)).toEqual(["completed", "completed", "completed"]);
      expect(provider.requests.length).toBe(6);

      // No spend counted twice: the killed calls produced nothing and settled nothing; the
      // recovered ones are in the ledger once, and the Redis counter says the same.
      const ledger = await db.pool.query<{ cost: string }>(
        "select coalesce(sum(cost_usd), 0)::text as cost from model_usage where tenant_id = $1",
        [tenant],
      );
      const spentNano = Math.round(Number(ledger.rows[0]?.cost) * 1e9);
      expect(spentNano).toBe(3 * Math.round(callCostUsd({ promptTokens: 90, completionTokens: 50 }, PRICING) * 1e9));
      expect(Number(await redis.get(keys.budgetSpent(budgetKey)))).toBe(spentNano);

      // No leak: the killed host's reservations count for nothing any more. A budget one
      // nano-dollar above the spend admits a call only if nothing at all is reserved.
      const store = createLeaseStore(redis, await loadQuotaScripts(), { heartbeatIntervalMs: heartbeatMs });
      const probe = await store.acquire("leak-probe", [], {
        budgets: [{ key: budgetKey, limitNano: spentNano + 1, amountNano: 1, floorNano: 0, ttlMs: 60_000 }],
      });
      expect(probe.admitted).toBe(true);
      expect(await redis.zrange(keys.budgetReservations(budgetKey), 0, -1)).toEqual(["leak-probe"]);
    } finally {
      if (killed.process.exitCode === null && killed.process.signalCode === null)
        process.kill(-(killed.process.pid as number), "SIGKILL");
      await survivor?.stop().catch(() => {});
    }
  });
});
