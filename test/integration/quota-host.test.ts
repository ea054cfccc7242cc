/**
 * The quota as a host shows it to operators: `quota_wait_seconds` counts every way a wait ends
 * (admitted; timed out at the limit; aborted by a cancel; timed out because Redis was down), and
 * `/readyz` reports the quota's circuit breaker (open → 503 with the reason, until a quota call
 * succeeds again). One in-process host with a quota of 1; real Postgres, redis-server (stopped
 * and restarted on its port) behind the Upstash bridge, and the mock model.
 */
import { randomUUID } from "node:crypto";
import { eq } from "drizzle-orm";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startHost } from "../../sandbox-host/host";
import { HostConfigSchema } from "../../sandbox-host/host-config";
import { silentLogger } from "../../sandbox-host/log";
import { createOpenAICompatibleClient } from "../../sandbox-host/model/openai-compatible";
import { requestCancel } from "../../src/db/control-repo";
import * as schema from "../../src/db/schema";
import { redisKeys } from "../../src/quota/keys";
import { createRedisClient } from "../../src/quota/redis";
import { MOCK_MODEL_NAME } from "../../tools/mock-model/main";
import { waitFor } from "../../tools/stack/services/ports";
import { type RedisService, startRedis } from "../../tools/stack/services/redis";
import type { TestDb } from "../helpers/db";
import { type HostServices, startHostServices } from "../helpers/host-services";
import { sampleValue } from "../helpers/metrics";
import { requireBinary } from "../helpers/require";

const canRun = await requireBinary("redis-server", "apt-get install redis-server");

const TENANT = "t-quota-host";
const BRIDGE_TOKEN = "quota-host-bridge-token";
const MAX_WAIT_MS = 2500;

let services: HostServices;
/** The redis-server started again after the outage (the suite's own one is stopped by then). */
let restarted: RedisService | undefined;

if (canRun) {
  beforeAll(async () => {
    services = await startHostServices({ bridgeToken: BRIDGE_TOKEN, mock: { defaultTtftMs: 5 } });
  });
  afterAll(async () => {
    await restarted?.stop();
    await services?.stop();
  });
}

async function submit(t: TestDb, content: string): Promise<string> {
  const id = randomUUID();
  await t.db.insert(schema.jobs).values({ id, tenantId: TENANT, input: { messages: [{ role: "user", content }] } });
  return id;
}

async function ended(t: TestDb, id: string) {
  return waitFor(
    `job ${id} to end`,
    async () => {
      const [row] = await t.db.select().from(schema.jobs).where(eq(schema.jobs.id, id));
      return row && !["queued", "running"].includes(row.state) ? row : null;
    },
    { timeoutMs: 30_000, intervalMs: 25 },
  );
}

describe.skipIf(!canRun)("the quota as the host reports it", () => {
  it("quota_wait_seconds counts admitted, limit and Redis timeouts, and aborted waits; /readyz reports the open breaker", async () => {
    const t = await services.pgStack.freshDb(6);
    await t.db.insert(schema.tenants).values({ id: TENANT, name: "quota host" });
    const config = HostConfigSchema.parse({
      hostId: `quota-host-${randomUUID().slice(0, 8)}`,
      databaseUrl: t.url,
      redis: { url: services.bridge.url, token: BRIDGE_TOKEN },
      gatewayUrl: services.ingest.url,
      signingSecret: "quota-host-signing-secret-0123456789",
      heartbeatMs: 500,
      quotaModelLimit: 1,
      quotaMaxWaitMs: MAX_WAIT_MS,
      shutdownGraceMs: 0,
    });
    const model = createOpenAICompatibleClient({ baseUrl: services.mock.url, apiKey: "mock", model: MOCK_MODEL_NAME });
    const host = await startHost(config, { model, modelName: MOCK_MODEL_NAME, log: silentLogger, sandbox: null });
    const waits = (outcome: string, reason: string) =>
      sampleValue(host.metricsUrl, "quota_wait_seconds_count", { outcome, reason });
    const ready = async () => {
      const res = await fetch(host.readyUrl);
      return { status: res.status, body: (await res.json()) as Record<string, unknown> & { reasons: string[] } };
    };
    try {
      expect(await ready()).toMatchObject({
        status: 200,
        body: { ready: true, reasons: [], quota: { breaker: "closed" } },
      });
      for (const [o, r] of [
        ["admitted", "none"],
        ["timed_out", "limit_reached"],
        ["timed_out", "redis_unavailable"],
        ["aborted", "none"],
      ] as const)
        expect(await waits(o, r), `${o}/${r}`).toBe(0);

      // A holds the only slot for 6 s (its answer is late); B and C queue behind it.
      const a = await submit(t, '!mock {"reply": "a", "ttft_ms": 6000}');
      await waitFor("A to hold the slot", async () => (await sampleValue(host.metricsUrl, "quota_leases_held")) === 1);
      const b = await submit(t, "b");
      const c = await submit(t, "c");
      await waitFor("C to be running (waiting for quota)", async () => {
        const [row] = await t.db.select().from(schema.jobs).where(eq(schema.jobs.id, c));
        return row?.state === "running";
      });
      // C is cancelled while it waits: durable first, then the hint the host polls (~200 ms).
      expect(await requestCancel(t.db, TENANT, c)).toBe("requested");
      await createRedisClient({ url: services.bridge.url, token: BRIDGE_TOKEN }).set(redisKeys().cancelHint(c), "1", {
        ex: 60,
      });
      expect((await ended(t, c)).state).toBe("cancelled");
      // B gives up after QUOTA_MAX_WAIT_MS: failed, saying why.
      const rowB = await ended(t, b);
      expect({ state: rowB.state, code: rowB.error?.code }).toEqual({ state: "failed", code: "quota_unavailable" });
      expect(rowB.error?.message).toMatch(/no model quota slot became free/);
      expect((await ended(t, a)).state).toBe("completed");
      expect(await waits("admitted", "none")).toBe(1);
      expect(await waits("timed_out", "limit_reached")).toBe(1);
      expect(await waits("aborted", "none")).toBe(1);

      // Redis goes away: D's acquire fails, the breaker opens, /readyz says so, D times out.
      await services.redisService.stop();
      const d = await submit(t, "d");
      const notReady = await waitFor(
        "/readyz to report the open breaker",
        async () => {
          const r = await ready();
          return r.status === 503 ? r : null;
        },
        { timeoutMs: 15_000, intervalMs: 25 },
      );
      expect(notReady.body).toMatchObject({ ready: false, quota: { breaker: "open" } });
      expect(notReady.body.reasons).toEqual([expect.stringMatching(/^quota circuit breaker open: .*no model call/)]);
      expect(await sampleValue(host.metricsUrl, "quota_breaker_open")).toBe(1);
      const rowD = await ended(t, d);
      expect({ state: rowD.state, code: rowD.error?.code }).toEqual({ state: "failed", code: "quota_unavailable" });
      expect(rowD.error?.message).toMatch(/Redis unavailable/);
      expect(await waits("timed_out", "redis_unavailable")).toBe(1);
      // Nothing has asked Redis since: the breaker stays open and the host stays not ready.
      expect((await ready()).status).toBe(503);

      // Redis is back: the next run's acquire is the probe that closes the breaker.
      restarted = await startRedis({ port: services.redisService.port });
      const e = await submit(t, "e");
      expect((await ended(t, e)).state).toBe("completed");
      expect(await ready()).toMatchObject({ status: 200, body: { ready: true, quota: { breaker: "closed" } } });
      expect(await sampleValue(host.metricsUrl, "quota_breaker_open")).toBe(0);
      expect(await waits("admitted", "none")).toBe(2);
    } finally {
      await host.close({ graceMs: 0 });
    }
  }, 90_000);
});
