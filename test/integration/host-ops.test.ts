/**
 * A real host wired for an orchestrator: its LISTEN connection goes to DATABASE_DIRECT_URL (the
 * pool keeps DATABASE_URL), its metrics listener binds where HOST_METRICS_HOST says, and its
 * /metrics carries the queue-depth gauges sampled from Postgres. Real Postgres, Redis through
 * the Upstash bridge, the mock model.
 */
import { randomUUID } from "node:crypto";
import { networkInterfaces } from "node:os";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type RunningHost, startHost } from "../../sandbox-host/host";
import { HostConfigSchema } from "../../sandbox-host/host-config";
import { silentLogger } from "../../sandbox-host/log";
import { createOpenAICompatibleClient } from "../../sandbox-host/model/openai-compatible";
import * as schema from "../../src/db/schema";
import { MOCK_MODEL_NAME } from "../../tools/mock-model/main";
import { waitFor } from "../../tools/stack/services/ports";
import type { TestDb } from "../helpers/db";
import { type HostServices, startHostServices } from "../helpers/host-services";
import { sampleValue } from "../helpers/metrics";
import { requireBinary } from "../helpers/require";

const canRun = await requireBinary("redis-server", "apt-get install redis-server");
const BRIDGE_TOKEN = "host-ops-bridge-token";
const TENANT = "t-ops";

let services: HostServices;

if (canRun) {
  beforeAll(async () => {
    services = await startHostServices({ bridgeToken: BRIDGE_TOKEN });
  });
  afterAll(async () => services?.stop());
}

async function freshDb(): Promise<TestDb> {
  const t = await services.pgStack.freshDb(4);
  await t.db.insert(schema.tenants).values({ id: TENANT, name: "ops" });
  return t;
}

async function withHost<T>(
  t: TestDb,
  over: Record<string, unknown>,
  fn: (host: RunningHost) => Promise<T>,
): Promise<T> {
  const config = HostConfigSchema.parse({
    hostId: `ops-${randomUUID().slice(0, 8)}`,
    databaseUrl: t.url,
    redis: { url: services.bridge.url, token: BRIDGE_TOKEN },
    gatewayUrl: services.ingest.url,
    signingSecret: "host-ops-test-signing-secret-0123456789",
    quotaModelLimit: 0,
    sandboxEnabled: false,
    ...over,
  });
  const model = createOpenAICompatibleClient({ baseUrl: services.mock.url, apiKey: "mock", model: MOCK_MODEL_NAME });
  const host = await startHost(config, { model, log: silentLogger });
  try {
    return await fn(host);
  } finally {
    await host.close({ graceMs: 0 });
  }
}

const withApp = (url: string, name: string) => {
  const u = new URL(url);
  u.searchParams.set("application_name", name);
  return u.toString();
};

describe.skipIf(!canRun)("a host wired for an orchestrator", () => {
  it("LISTENs on DATABASE_DIRECT_URL and runs its pool on DATABASE_URL", async () => {
    const t = await freshDb();
    const config = {
      databaseUrl: withApp(t.url, "ear-pool"),
      databaseDirectUrl: withApp(t.url, "ear-direct"),
      listen: true,
    };
    await withHost(t, config, async () => {
      const sessions = await waitFor(
        "the LISTEN session",
        async () => {
          const { rows } = await t.pool.query<{ app: string; query: string }>(
            "select application_name as app, query from pg_stat_activity where datname = current_database() and application_name like 'ear-%'",
          );
          return rows.some((r) => r.query.startsWith("LISTEN")) ? rows : null;
        },
        { timeoutMs: 10_000, intervalMs: 50 },
      );
      const listening = sessions.filter((s) => s.query.startsWith("LISTEN"));
      expect(listening.map((s) => s.app)).toEqual(["ear-direct"]);
      expect(sessions.some((s) => s.app === "ear-pool")).toBe(true);
    });
  });

  it("binds the metrics listener to HOST_METRICS_HOST and exports the queue depth sampled from Postgres", async () => {
    const t = await freshDb();
    // One run slot, held by a job whose model answers only after a minute: the jobs inserted
    // next wait for a slot, which is what the gauges must show.
    const over = { metricsHost: "0.0.0.0", maxRuns: 1, queueDepthMs: 1000 };
    await withHost(t, over, async (host) => {
      expect(new URL(host.metricsUrl).hostname).toBe("0.0.0.0");
      const external = Object.values(networkInterfaces())
        .flat()
        .find((a) => a && a.family === "IPv4" && !a.internal);
      if (external) {
        const port = new URL(host.metricsUrl).port;
        const res = await fetch(`http://${external.address}:${port}/readyz`);
        expect(res.status).toBe(200);
      }
      const blocker = randomUUID();
      await t.db.insert(schema.jobs).values({
        id: blocker,
        tenantId: TENANT,
        input: { messages: [{ role: "user", content: '!mock {"ttft_ms": 60000}' }] },
      });
      await waitFor(
        "the slot to be taken",
        async () => (await t.pool.query("select 1 from jobs where id = $1 and state = 'running'", [blocker])).rowCount,
        { timeoutMs: 10_000, intervalMs: 50 },
      );
      await t.pool.query(
        `insert into jobs (id, tenant_id, state, created_at, input)
         select gen_random_uuid(), $1, 'queued', now() - interval '90 seconds', '{"messages":[]}' from generate_series(1, 7)`,
        [TENANT],
      );
      const waiting = await waitFor(
        "the sampled queue depth",
        async () => {
          const v = await sampleValue(host.metricsUrl, "queue_jobs_waiting");
          return v === 7 ? v : null;
        },
        { timeoutMs: 10_000, intervalMs: 100 },
      );
      expect(waiting).toBe(7);
      expect(await sampleValue(host.metricsUrl, "queue_jobs_waiting_by_tenant", { tenant: TENANT })).toBe(7);
      expect(await sampleValue(host.metricsUrl, "queue_oldest_waiting_age_seconds")).toBeGreaterThanOrEqual(90);
      expect(await sampleValue(host.metricsUrl, "queue_depth_sample_errors_total")).toBe(0);
    });
  });
});
