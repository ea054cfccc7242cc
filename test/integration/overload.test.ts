/**
 * Overload degrades to waiting, never to failure. Three bounds a host keeps under its own load,
 * each against the real parts (Docker, Postgres, Redis behind the Upstash bridge, the mock model):
 *
 * - sandbox creations in flight never exceed SANDBOX_CREATE_CONCURRENCY, read from the engine's
 *   own timestamps (network created → container started), and a queued creation is announced and
 *   can be left (a cancelled run);
 * - while SANDBOX_CREATE_QUEUE creations wait, the host claims nothing more: a job submitted then
 *   is claimed only once the queue has drained below the bound, and the queued tool runs report
 *   `sandbox.waiting` and complete;
 * - quota lease renewals keep their rate when each renewal takes longer than its period (Redis
 *   round trips of over a second were seen with the machine's load average at 44): a run whose
 *   model turn outlasts several renewals keeps its lease.
 */
import { createHash, randomUUID } from "node:crypto";
import { createServer } from "node:http";
import type { AddressInfo } from "node:net";
import { type ChainableCommander, Redis as IORedis } from "ioredis";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type RunningHost, startHost } from "../../sandbox-host/host";
import { HostConfigSchema } from "../../sandbox-host/host-config";
import { silentLogger } from "../../sandbox-host/log";
import { createOpenAICompatibleClient } from "../../sandbox-host/model/openai-compatible";
import { loadQuotaScripts } from "../../sandbox-host/quota/load-scripts";
import { MAX_LEASE_RETRIES } from "../../sandbox-host/runner/model-call";
import type { Docker } from "../../sandbox-host/sandbox/docker";
import { createSandboxManager, LABEL_RUN } from "../../sandbox-host/sandbox/manager";
import type { IngestBatch } from "../../src/contracts/events";
import * as schema from "../../src/db/schema";
import { MOCK_MODEL_NAME } from "../../tools/mock-model/main";
import { startAckingIngest } from "../../tools/stack/services/acking-ingest";
import { waitFor } from "../../tools/stack/services/ports";
import type { TestDb } from "../helpers/db";
import { removeHostObjects, requireDocker, TEST_IMAGE, testHostId } from "../helpers/docker";
import { type HostServices, startHostServices } from "../helpers/host-services";
import { requireBinary } from "../helpers/require";

const canRun = await requireBinary("redis-server", "apt-get install redis-server");
const docker: Docker | null = canRun ? await requireDocker() : null;

const BRIDGE_TOKEN = "overload-bridge-token";
const TENANT = "t-overload";
const SECRET = "overload-signing-secret-0123456789";
const mock = (script: object) => ({ role: "user" as const, content: `!mock ${JSON.stringify(script)}` });

let services: HostServices | undefined;
const hostIds: string[] = [];

if (canRun) {
  beforeAll(async () => {
    services = await startHostServices({
      bridgeToken: BRIDGE_TOKEN,
      mock: { defaultTtftMs: 5, defaultTokensPerS: 500 },
    });
  });
  afterAll(async () => {
    if (docker) for (const id of hostIds) await removeHostObjects(docker, id);
    await services?.stop();
  });
}

/** The acking ingest, keeping each job's first-delivered events. */
async function recordingIngest(): Promise<{ url: string; events: Map<string, IngestBatch["events"]>; close(): void }> {
  const events = new Map<string, IngestBatch["events"]>();
  const ingest = await startAckingIngest({
    onEvent: (e, jobId) => events.set(jobId, [...(events.get(jobId) ?? []), e]),
  });
  return { url: ingest.url, events, close: () => void ingest.close() };
}

/** The longest stretch during which more than `n` of the intervals overlapped, and how many did. */
function maxOverlap(intervals: Array<[number, number]>): number {
  const points = intervals.flatMap(([a, b]) => [
    [a, 1],
    [b, -1],
  ]);
  // At a tie an end comes first: back-to-back creations do not overlap.
  points.sort((x, y) => (x[0] as number) - (y[0] as number) || (x[1] as number) - (y[1] as number));
  let now = 0;
  let max = 0;
  for (const [, d] of points) {
    now += d as number;
    max = Math.max(max, now);
  }
  return max;
}

/** A host without sandboxes on the mock model, finding jobs inserted straight into Postgres. */
async function startTextHost(
  t: TestDb,
  o: { hostId: string; redisUrl: string; gatewayUrl: string; heartbeatMs: number } & Record<string, unknown>,
): Promise<RunningHost> {
  const { redisUrl, ...rest } = o;
  const config = HostConfigSchema.parse({
    ...rest,
    databaseUrl: t.url,
    redis: { url: redisUrl, token: BRIDGE_TOKEN },
    signingSecret: SECRET,
    listen: false,
    sweepMs: 50,
    sweepOlderThanMs: 0,
    sandboxEnabled: false,
    shutdownGraceMs: 0,
  });
  const s = services as HostServices;
  const model = createOpenAICompatibleClient({ baseUrl: s.mock.url, apiKey: "mock", model: MOCK_MODEL_NAME });
  return startHost(config, { model, log: silentLogger, sandbox: null });
}

describe.skipIf(!canRun || !docker)("overload degrades to waiting", () => {
  it("sandbox creations in flight never exceed the bound; the rest queue in order and may leave", {
    timeout: 120_000,
  }, async () => {
    const d = docker as Docker;
    const hostId = testHostId("overload-create");
    hostIds.push(hostId);
    const m = createSandboxManager({
      docker: d,
      hostId,
      image: TEST_IMAGE,
      pool: "10.253.252.0/24",
      createConcurrency: 2,
    });
    const queued: number[] = [];
    const sandboxes = await Promise.all(
      Array.from({ length: 6 }, (_, i) => m.ensure(`run-${i}`, { onQueued: (ahead) => queued.push(ahead) })),
    );
    // The engine's own clock: each sandbox's creation spans its network's creation to its
    // container's start.
    const spans = await Promise.all(
      sandboxes.map(async (sb): Promise<[number, number]> => {
        const [net, c] = await Promise.all([
          d.getNetwork(sb.networkId).inspect(),
          d.getContainer(sb.containerId).inspect(),
        ]);
        return [Date.parse(net.Created), Date.parse(c.State.StartedAt)];
      }),
    );
    console.log(
      `overload: creation spans (ms from the first) ${JSON.stringify(spans.map(([a, b]) => [a - spans[0]![0], b - spans[0]![0]]))}`,
    );
    expect(maxOverlap(spans)).toBeLessThanOrEqual(2);
    // Four waited, told how many were ahead of them.
    expect(queued.sort()).toEqual([0, 1, 2, 3]);
    expect(m.creationLoad()).toEqual({ creating: 0, queued: 0, concurrency: 2 });

    // A cancelled run leaves the queue: nothing is created for it.
    const one = createSandboxManager({
      docker: d,
      hostId,
      image: TEST_IMAGE,
      pool: "10.253.252.0/24",
      createConcurrency: 1,
    });
    const cancel = new AbortController();
    const first = one.ensure("first");
    const left = one.ensure("left", {
      signal: cancel.signal,
      onQueued: () => cancel.abort(new Error("run cancelled")),
    });
    await expect(left).rejects.toThrow("run cancelled");
    await first;
    const leftovers = await d.listContainers({ all: true, filters: JSON.stringify({ label: [`${LABEL_RUN}=left`] }) });
    expect(leftovers).toHaveLength(0);
    expect(one.creationLoad()).toEqual({ creating: 0, queued: 0, concurrency: 1 });
  });

  it("claims stop while sandbox creations queue past the bound; queued runs report sandbox.waiting and complete", {
    timeout: 180_000,
  }, async () => {
    const s = services as HostServices;
    const t: TestDb = await s.pgStack.freshDb(6);
    await t.db.insert(schema.tenants).values({ id: TENANT, name: "overload" });
    const ingest = await recordingIngest();
    const hostId = testHostId("overload-claims");
    hostIds.push(hostId);
    const sandbox = createSandboxManager({
      docker: docker as Docker,
      hostId,
      image: TEST_IMAGE,
      pool: "10.253.253.0/24",
      createConcurrency: 1,
    });
    const config = HostConfigSchema.parse({
      hostId,
      databaseUrl: t.url,
      redis: { url: s.bridge.url, token: BRIDGE_TOKEN },
      gatewayUrl: ingest.url,
      signingSecret: SECRET,
      maxRuns: 8,
      listen: false,
      // Jobs inserted straight into Postgres are found by the sweep; 50 ms keeps the claim prompt.
      sweepMs: 50,
      sweepOlderThanMs: 0,
      sandboxCreateQueue: 2,
      quotaModelLimit: 0,
      shutdownGraceMs: 0,
    });
    const model = createOpenAICompatibleClient({ baseUrl: s.mock.url, apiKey: "mock", model: MOCK_MODEL_NAME });
    let host: RunningHost | undefined;
    try {
      host = await startHost(config, { model, log: silentLogger, sandbox });
      const toolJobs = Array.from({ length: 5 }, () => randomUUID());
      await t.db.insert(schema.jobs).values(
        toolJobs.map((id, i) => ({
          id,
          tenantId: TENANT,
          tools: ["shell" as const],
          input: {
            messages: [mock({ reply: `done ${i}`, tool_calls: [{ name: "shell", args: { command: `echo t${i}` } }] })],
          },
        })),
      );
      // Tool runs admitted: one creating, the rest queued up to (at least) the bound of 2.
      await waitFor("sandbox creations queued up to the bound", async () => sandbox.creationLoad().queued >= 2, {
        timeoutMs: 30_000,
        intervalMs: 10,
      });
      // The wait is visible to the operator too.
      const scraped = await (await fetch(host.metricsUrl)).text();
      expect(Number(/^sandbox_create_queued\{[^}]*\} (\d+)$/m.exec(scraped)?.[1])).toBeGreaterThanOrEqual(1);
      const textJob = randomUUID();
      await t.db
        .insert(schema.jobs)
        .values({ id: textJob, tenantId: TENANT, input: { messages: [mock({ reply: "hi" })] } });
      // When the queue first drops below the bound, seen from the same process every 5 ms.
      let drainedAt = 0;
      await waitFor(
        "the queue drained below the bound",
        async () => {
          if (sandbox.creationLoad().queued < 2) drainedAt = Date.now();
          return drainedAt > 0;
        },
        { timeoutMs: 60_000, intervalMs: 5 },
      );
      const rows = async () =>
        (
          await t.pool.query<{ id: string; state: string; claimed_at: Date | null; error: unknown }>(
            "SELECT id, state, claimed_at, error FROM jobs WHERE id = ANY($1)",
            [[...toolJobs, textJob]],
          )
        ).rows;
      await waitFor("every job completed", async () => (await rows()).every((r) => r.state === "completed"), {
        timeoutMs: 90_000,
        intervalMs: 100,
      });
      const text = (await rows()).find((r) => r.id === textJob)!;
      const claimedAfterDrainMs = text.claimed_at!.getTime() - drainedAt;
      console.log(`overload: the text job was claimed ${claimedAfterDrainMs} ms after the queue drained`);
      // Postgres stamps the claim at its transaction start: allow it a few ms before our poll saw the drain.
      expect(claimedAfterDrainMs).toBeGreaterThanOrEqual(-20);
      // The runs that waited said so, with their place in the queue, and none of them failed.
      await waitFor(
        "the terminal events delivered",
        async () => toolJobs.every((id) => ingest.events.get(id)?.some((e) => e.type === "run.completed")),
        {
          timeoutMs: 10_000,
          intervalMs: 50,
        },
      );
      const waits = toolJobs.flatMap((id) =>
        (ingest.events.get(id) ?? [])
          .filter((e) => e.type === "sandbox.waiting")
          .map((e) => (e.payload as { ahead: number }).ahead),
      );
      // Every run but the first creation waited, each told its own place.
      expect(waits.length).toBeGreaterThanOrEqual(2);
      expect(new Set(waits).size).toBe(waits.length);
      for (const id of toolJobs) {
        const types = (ingest.events.get(id) ?? []).map((e) => e.type);
        // Waiting comes before the sandbox exists, and the tool result after it.
        if (types.includes("sandbox.waiting")) {
          expect(types.indexOf("sandbox.waiting")).toBeLessThan(types.indexOf("sandbox.created"));
        }
        expect(types.at(-1)).toBe("run.completed");
      }
    } finally {
      await host?.close({ graceMs: 0 });
      ingest.close();
    }
  });
});

describe.skipIf(!canRun)("quota lease renewal under slow Redis", () => {
  it("a renewal slower than its period does not cost a long model turn its lease", { timeout: 120_000 }, async () => {
    const s = services as HostServices;
    const t: TestDb = await s.pgStack.freshDb(6);
    await t.db.insert(schema.tenants).values({ id: TENANT, name: "overload" });
    const HEARTBEAT_MS = 1000;
    const RENEW_DELAY_MS = 1200;
    // Only the renew script's EVALSHA is slowed: admission, the one-off EVAL that loads the
    // script, and everything else answer at once, so what is measured is the renewal schedule.
    const scripts = await loadQuotaScripts();
    const renewSha = createHash("sha1").update(scripts.renew).digest("hex");
    const bridgeUrl = new URL(s.bridge.url);
    let renewals = 0;
    const proxy = createServer(async (req, res) => {
      const chunks: Buffer[] = [];
      for await (const c of req) chunks.push(c as Buffer);
      const body = Buffer.concat(chunks);
      const text = body.toString("utf8");
      if (text.includes(renewSha)) {
        renewals++;
        await new Promise((r) => setTimeout(r, RENEW_DELAY_MS));
      }
      const upstream = await fetch(new URL(req.url ?? "/", bridgeUrl), {
        method: req.method,
        headers: { authorization: req.headers.authorization ?? "", "content-type": "application/json" },
        body: req.method === "GET" || req.method === "HEAD" ? undefined : body,
      });
      res.writeHead(upstream.status, { "content-type": upstream.headers.get("content-type") ?? "application/json" });
      res.end(Buffer.from(await upstream.arrayBuffer()));
    });
    await new Promise<void>((r) => proxy.listen(0, "127.0.0.1", r));
    let host: RunningHost | undefined;
    try {
      host = await startTextHost(t, {
        hostId: testHostId("overload-lease"),
        redisUrl: `http://127.0.0.1:${(proxy.address() as AddressInfo).port}`,
        gatewayUrl: s.ingest.url,
        heartbeatMs: HEARTBEAT_MS,
      });
      const jobId = randomUUID();
      // One model turn of ~8 s: several lease periods (lease timeout = 3 heartbeats = 3 s).
      const reply = Array.from({ length: 80 }, (_, i) => `w${i}`).join(" ");
      await t.db.insert(schema.jobs).values({
        id: jobId,
        tenantId: TENANT,
        input: { messages: [mock({ reply, ttft_ms: 20, tokens_per_s: 10 })] },
      });
      const row = async () =>
        (await t.pool.query<{ state: string; error: unknown }>("SELECT state, error FROM jobs WHERE id = $1", [jobId]))
          .rows[0]!;
      await waitFor("the job finished", async () => ["completed", "failed"].includes((await row()).state), {
        timeoutMs: 60_000,
        intervalMs: 100,
      });
      const final = await row();
      console.log(
        `overload: lease run ended ${final.state} after ${renewals} slowed renewals ${JSON.stringify(final.error)}`,
      );
      expect(final).toEqual({ state: "completed", error: null });
      expect(renewals).toBeGreaterThanOrEqual(3);
    } finally {
      await host?.close({ graceMs: 0 });
      proxy.closeAllConnections();
      proxy.close();
    }
  });
});

/**
 * A lost quota lease costs the turn, not the run: the lease is taken away
 * mid-answer, straight in Redis as a purge or an expiry would, and the host's next renewal finds
 * it gone. Fail-closed stays (that call stops), then the turn is asked again under a new lease,
 * announced by `model.turn` `lease_lost`; with no slot back within QUOTA_MAX_WAIT_MS the run
 * still fails `quota_lease_lost`.
 */
describe.skipIf(!canRun)("a lost quota lease retries the turn", () => {
  const HEARTBEAT_MS = 500;
  // ~3 s of answer: several renewals happen while it streams.
  const REPLY = Array.from({ length: 30 }, (_, i) => `w${i}`).join(" ");

  async function leaseRun(opts: {
    maxWaitMs: number;
    modelLimit: number;
    steal: (tx: ChainableCommander, key: string, member: string) => void;
    /** Take every later lease of the execution too, each as soon as it shows in the ZSET. */
    stealEvery?: boolean;
  }) {
    const s = services as HostServices;
    const t: TestDb = await s.pgStack.freshDb(6);
    await t.db.insert(schema.tenants).values({ id: TENANT, name: "overload" });
    const ingest = await recordingIngest();
    const redis = new IORedis(s.redisService.url);
    let host: RunningHost | undefined;
    try {
      host = await startTextHost(t, {
        hostId: testHostId("overload-lost"),
        redisUrl: s.bridge.url,
        gatewayUrl: ingest.url,
        heartbeatMs: HEARTBEAT_MS,
        quotaModelLimit: opts.modelLimit,
        quotaMaxWaitMs: opts.maxWaitMs,
      });
      const jobId = randomUUID();
      await t.db.insert(schema.jobs).values({
        id: jobId,
        tenantId: TENANT,
        input: { messages: [mock({ reply: REPLY, ttft_ms: 20, tokens_per_s: 10 })] },
      });
      // The first turn's lease (holder `<execution>:1`) once the answer has begun to stream.
      let stolen: { key: string; member: string } | undefined;
      await waitFor(
        "the first turn holds its lease and streams",
        async () => {
          if (!ingest.events.get(jobId)?.some((e) => e.type === "model.delta")) return false;
          for (const key of await redis.keys("ear:quota:model:*")) {
            const member = (await redis.zrange(key, "0", "-1")).find((m) => m.endsWith(":1"));
            if (member) stolen = { key, member };
          }
          return stolen !== undefined;
        },
        { timeoutMs: 30_000, intervalMs: 20 },
      );
      const { key, member } = stolen!;
      const tx = redis.multi();
      opts.steal(tx, key, member);
      await tx.exec();
      const row = async () =>
        (
          await t.pool.query<{ state: string; output: string | null; error: { code: string; message: string } | null }>(
            "SELECT state, output, error FROM jobs WHERE id = $1",
            [jobId],
          )
        ).rows[0]!;
      const execution = member.slice(0, member.lastIndexOf(":") + 1);
      const taken = new Set([member]);
      await waitFor(
        "the job finished",
        async () => {
          if (opts.stealEvery) {
            for (const m of await redis.zrange(key, "0", "-1")) {
              if (m.startsWith(execution) && !taken.has(m)) {
                taken.add(m);
                await redis.zrem(key, m);
              }
            }
          }
          return ["completed", "failed"].includes((await row()).state);
        },
        { timeoutMs: 60_000, intervalMs: 20 },
      );
      await waitFor(
        "the terminal event delivered",
        async () =>
          ingest.events
            .get(jobId)
            ?.some((e) => e.type.startsWith("run.") && e.type !== "run.started" && e.type !== "run.prepared") ?? false,
        { timeoutMs: 10_000, intervalMs: 50 },
      );
      const events = ingest.events.get(jobId) ?? [];
      const left = await redis.zrange(key, "0", "-1");
      await redis.del(key);
      return { final: await row(), events, left, member, taken: [...taken] };
    } finally {
      await host?.close({ graceMs: 0 });
      ingest.close();
      redis.disconnect();
    }
  }

  const turns = (events: IngestBatch["events"]) =>
    events.filter((e) => e.type === "model.turn").map((e) => e.payload as { turn: number; reason: string });

  it("a lease lost mid-answer: the turn is asked again under a new lease and the job completes", {
    timeout: 120_000,
  }, async () => {
    // As an expiry purge would: the lease is gone from its key, and the next renewal says so.
    const r = await leaseRun({ maxWaitMs: 10_000, modelLimit: 4, steal: (tx, key, member) => tx.zrem(key, member) });
    console.log(
      `overload: lease-lost run ended ${r.final.state} ${JSON.stringify(r.final.error)}; turns ${JSON.stringify(turns(r.events))}`,
    );
    expect(r.final).toEqual({ state: "completed", output: REPLY, error: null });
    expect(turns(r.events)).toEqual([
      { turn: 1, reason: "start" },
      { turn: 1, reason: "lease_lost" },
    ]);
    // The deltas after the last model.turn are the answer: the discarded partial turn is before it.
    const types = r.events.map((e) => e.type);
    const restart = types.lastIndexOf("model.turn");
    expect(types.slice(0, restart)).toContain("model.delta");
    const after = r.events.slice(restart).filter((e) => e.type === "model.delta");
    expect(after.map((e) => (e.payload as { text: string }).text).join("")).toBe(REPLY);
    expect(types.at(-1)).toBe("run.completed");
    // Every lease given back.
    expect(r.left).toEqual([]);
  });

  it("leases lost again and again: after MAX_LEASE_RETRIES retries of the turn the run fails quota_lease_lost", {
    timeout: 120_000,
  }, async () => {
    const r = await leaseRun({
      maxWaitMs: 10_000,
      modelLimit: 4,
      steal: (tx, key, member) => tx.zrem(key, member),
      stealEvery: true,
    });
    console.log(
      `overload: every-lease run ended ${r.final.state} ${JSON.stringify(r.final.error)}; taken ${JSON.stringify(r.taken)}`,
    );
    expect(r.final.state).toBe("failed");
    expect(r.final.error?.code).toBe("quota_lease_lost");
    expect(r.final.error?.message).toContain(`lost ${MAX_LEASE_RETRIES + 1} times in this turn`);
    // The first attempt and MAX_LEASE_RETRIES retries, each under its own holder, each announced.
    expect(r.taken).toHaveLength(MAX_LEASE_RETRIES + 1);
    expect(turns(r.events)).toEqual([
      { turn: 1, reason: "start" },
      ...Array.from({ length: MAX_LEASE_RETRIES }, () => ({ turn: 1, reason: "lease_lost" })),
    ]);
    expect(r.events.at(-1)?.type).toBe("run.failed");
  });

  it("a lease lost with no slot back within QUOTA_MAX_WAIT_MS: the run still fails quota_lease_lost", {
    timeout: 120_000,
  }, async () => {
    // Limit 1: the lease is taken and its slot given to another holder (fresh on the Redis
    // clock, so it outlives the 400 ms wait: the lease timeout is 3 heartbeats = 1.5 s).
    const r = await leaseRun({
      maxWaitMs: 400,
      modelLimit: 1,
      steal: (tx, key, member) => {
        tx.zrem(key, member);
        tx.eval(
          "local t = redis.call('TIME'); return redis.call('ZADD', KEYS[1], string.format('%d', t[1] * 1000 + math.floor(t[2] / 1000)), ARGV[1])",
          1,
          key,
          "another-host:1",
        );
      },
    });
    console.log(
      `overload: budget run ended ${r.final.state} ${JSON.stringify(r.final.error)}; turns ${JSON.stringify(turns(r.events))}`,
    );
    expect(r.final.state).toBe("failed");
    expect(r.final.error?.code).toBe("quota_lease_lost");
    expect(r.final.error?.message).toContain("no slot came back within the wait limit");
    // The retry was announced, and it waited (visibly) before giving up; no answer was made.
    expect(turns(r.events)).toEqual([
      { turn: 1, reason: "start" },
      { turn: 1, reason: "lease_lost" },
    ]);
    const types = r.events.map((e) => e.type);
    expect(types.slice(types.lastIndexOf("model.turn"))).toContain("quota.waiting");
    expect(types.at(-1)).toBe("run.failed");
    expect(r.left).toEqual(["another-host:1"]);
  });
});
