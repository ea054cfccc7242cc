/**
 * What a host's /metrics shows, and the five run timing facts behind the phase histograms:
 * each written once, only by the current owner, riding on writes the run makes anyway (never a
 * statement of their own), and every API view of a run using the one serializer
 * (src/domain/timing.ts).
 * Real Postgres (one cloned database per test), Redis through the Upstash bridge, the mock model.
 */
import { randomUUID } from "node:crypto";
import { readdir, readFile } from "node:fs/promises";
import { join, resolve } from "node:path";
import { eq } from "drizzle-orm";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type RunningHost, startHost } from "../../sandbox-host/host";
import { HostConfigSchema } from "../../sandbox-host/host-config";
import { type Logger, silentLogger } from "../../sandbox-host/log";
import { createHostMetrics, observeQuotaWait, timeSandboxOp } from "../../sandbox-host/metrics/metrics";
import { createOpenAICompatibleClient } from "../../sandbox-host/model/openai-compatible";
import { conversationMessages, listConversationJobsOldestFirst } from "../../src/db/conversations-repo";
import { toJobView } from "../../src/db/job-view";
import { getJob, listJobs } from "../../src/db/jobs-repo";
import { type ExecutionIdentity, heartbeat } from "../../src/db/ownership-repo";
import * as schema from "../../src/db/schema";
import { deriveLatency } from "../../src/domain/timing";
import type { UpstashBridge } from "../../tools/bridges/upstash-rest/main";
import { claimJob, finishJob, finishJobReporting, markStarted } from "../../tools/lib/single-row-writes";
import { MOCK_MODEL_NAME, type MockModel } from "../../tools/mock-model/main";
import { waitFor } from "../../tools/stack/services/ports";
import type { startTestPostgres, TestDb } from "../helpers/db";
import { type AckingIngest, type HostServices, startHostServices } from "../helpers/host-services";
import { samples } from "../helpers/metrics";
import { requireBinary } from "../helpers/require";

const canRun = await requireBinary("redis-server", "apt-get install redis-server");

const ROOT = resolve(import.meta.dirname, "../..");
const TENANT = "t-metrics";
const BRIDGE_TOKEN = "metrics-bridge-token";
const TIMING = ["created_at", "started_at", "prepared_at", "first_output_at", "finished_at"] as const;

let pgStack: Awaited<ReturnType<typeof startTestPostgres>>;
let bridge: UpstashBridge;
let mock: MockModel;
let ingest: AckingIngest;

async function freshDb(): Promise<TestDb> {
  const t = await pgStack.freshDb(4);
  await t.db.insert(schema.tenants).values({ id: TENANT, name: "metrics" });
  return t;
}

async function withHost<T>(t: TestDb, log: Logger, fn: (host: RunningHost) => Promise<T>): Promise<T> {
  const config = HostConfigSchema.parse({
    hostId: `metrics-${randomUUID().slice(0, 8)}`,
    databaseUrl: t.url,
    redis: { url: bridge.url, token: BRIDGE_TOKEN },
    gatewayUrl: ingest.url,
    signingSecret: "metrics-test-signing-secret-0123456789",
    listen: false,
  });
  const model = createOpenAICompatibleClient({ baseUrl: mock.url, apiKey: "mock", model: MOCK_MODEL_NAME });
  const host = await startHost(config, { model, log });
  try {
    return await fn(host);
  } finally {
    await host.close({ graceMs: 0 });
  }
}

async function runOneJob(t: TestDb, content: string, conversationId?: string) {
  const id = randomUUID();
  await t.db
    .insert(schema.jobs)
    .values({ id, tenantId: TENANT, conversationId, input: { messages: [{ role: "user", content }] } });
  return waitFor(
    "the job to finish",
    async () => {
      const [row] = await t.db.select().from(schema.jobs).where(eq(schema.jobs.id, id));
      return row && ["completed", "failed"].includes(row.state) ? row : null;
    },
    { timeoutMs: 15_000, intervalMs: 25 },
  );
}

const facts = (row: typeof schema.jobs.$inferSelect) =>
  deriveLatency({
    created_at: row.createdAt,
    started_at: row.startedAt,
    prepared_at: row.preparedAt,
    first_output_at: row.firstOutputAt,
    finished_at: row.finishedAt,
  });

/** Every change to a timing column, with the row's owner identity at the moment of the write. */
const TIMING_AUDIT_SQL = `
  CREATE TABLE timing_writes (job_id uuid, col text, was timestamptz, now_is timestamptz,
    owner text, epoch int, execution_id uuid, state text);
  CREATE TABLE job_versions (job_id uuid, at timestamptz DEFAULT clock_timestamp(), state text,
    heartbeat_changed bool, facts_changed bool);
  CREATE FUNCTION audit_timing() RETURNS trigger LANGUAGE plpgsql AS $$
  BEGIN
    INSERT INTO job_versions (job_id, state, heartbeat_changed, facts_changed) VALUES (NEW.id, NEW.state,
      NEW.heartbeat_at IS DISTINCT FROM OLD.heartbeat_at,
      NEW.prepared_at IS DISTINCT FROM OLD.prepared_at OR NEW.first_output_at IS DISTINCT FROM OLD.first_output_at);
    IF NEW.started_at IS DISTINCT FROM OLD.started_at THEN
      INSERT INTO timing_writes VALUES (NEW.id, 'started_at', OLD.started_at, NEW.started_at, NEW.owner, NEW.epoch, NEW.execution_id, NEW.state); END IF;
    IF NEW.prepared_at IS DISTINCT FROM OLD.prepared_at THEN
      INSERT INTO timing_writes VALUES (NEW.id, 'prepared_at', OLD.prepared_at, NEW.prepared_at, NEW.owner, NEW.epoch, NEW.execution_id, NEW.state); END IF;
    IF NEW.first_output_at IS DISTINCT FROM OLD.first_output_at THEN
      INSERT INTO timing_writes VALUES (NEW.id, 'first_output_at', OLD.first_output_at, NEW.first_output_at, NEW.owner, NEW.epoch, NEW.execution_id, NEW.state); END IF;
    IF NEW.finished_at IS DISTINCT FROM OLD.finished_at THEN
      INSERT INTO timing_writes VALUES (NEW.id, 'finished_at', OLD.finished_at, NEW.finished_at, NEW.owner, NEW.epoch, NEW.execution_id, NEW.state); END IF;
    IF NEW.created_at IS DISTINCT FROM OLD.created_at THEN
      INSERT INTO timing_writes VALUES (NEW.id, 'created_at', OLD.created_at, NEW.created_at, NEW.owner, NEW.epoch, NEW.execution_id, NEW.state); END IF;
    RETURN NEW;
  END $$;
  CREATE TRIGGER audit_timing AFTER UPDATE ON jobs FOR EACH ROW EXECUTE FUNCTION audit_timing();`;

if (canRun) {
  let services: HostServices | undefined;
  beforeAll(async () => {
    services = await startHostServices({
      bridgeToken: BRIDGE_TOKEN,
      mock: { defaultTtftMs: 20, defaultTokensPerS: 500 },
    });
    ({ pgStack, bridge, mock, ingest } = services);
  });
  afterAll(async () => services?.stop());
}

describe.skipIf(!canRun)("host metrics and run timing facts", () => {
  it("/metrics shows every metric with HELP text and the host label; phases come from the timing facts", async () => {
    const t = await freshDb();
    await withHost(t, silentLogger, async (host) => {
      const row = await runOneJob(t, "hello metrics");
      expect(row.state).toBe("completed");
      const text = await (await fetch(host.metricsUrl)).text();
      const names = [
        "event_loop_lag_seconds",
        "claims_total",
        "runs_active",
        "runs_finished_total",
        "outbox_backlog",
        "run_phase_seconds",
        "quota_wait_seconds",
        "quota_breaker_open",
        "quota_leases_held",
        "quota_leases_lost_total",
        "sandboxes_active",
        "sandbox_create_queued",
        "sandbox_create_seconds",
        "sandbox_delete_seconds",
        "cancel_convergence_seconds",
        "offload_tasks_in_flight",
        "offload_tasks_queued",
        "offload_tasks_rejected_total",
        "offload_task_duration_seconds",
        "queue_jobs_waiting",
        "queue_oldest_waiting_age_seconds",
        "queue_jobs_waiting_by_tenant",
        "queue_oldest_waiting_age_seconds_by_tenant",
        "queue_depth_sample_errors_total",
        "process_cpu_seconds_total",
        "nodejs_eventloop_lag_seconds",
      ];
      for (const name of names) {
        const help = new RegExp(`^# HELP ${name.replace(/_total$/, "(_total)?")} \\S.{10,}`, "m");
        expect(text, name).toMatch(help);
      }
      const unlabelled = text.split("\n").filter((l) => l && !l.startsWith("#") && !l.includes(`host="${host.id}"`));
      expect(unlabelled).toEqual([]);
      const lagBuckets = (await samples(host.metricsUrl, "event_loop_lag_seconds_bucket")).map(
        (s) => /le="([^"]+)"/.exec(s.labels)![1],
      );
      expect(lagBuckets[0]).toBe("0.001");
      expect(lagBuckets).toContain("5");

      // One observation per phase, equal to what the API serializes from the same five facts.
      const latency = facts(row);
      const phaseSum = async (phase: string) =>
        (await samples(host.metricsUrl, "run_phase_seconds_sum")).find((s) => s.labels.includes(`phase="${phase}"`))
          ?.value;
      const phaseCount = async (phase: string) =>
        (await samples(host.metricsUrl, "run_phase_seconds_count")).find((s) => s.labels.includes(`phase="${phase}"`))
          ?.value;
      const expected: Record<string, number | null> = {
        dispatch: latency.dispatch_latency_ms,
        preparation: latency.preparation_latency_ms,
        model_first_output: latency.model_first_output_latency_ms,
        total: latency.total_latency_ms,
      };
      for (const [phase, ms] of Object.entries(expected)) {
        expect(ms, phase).not.toBeNull();
        expect(await phaseCount(phase), phase).toBe(1);
        expect(await phaseSum(phase), phase).toBeCloseTo(ms! / 1000, 6);
      }
      // The model's scripted 20 ms to first token is inside model_first_output, not preparation.
      expect(latency.model_first_output_latency_ms).toBeGreaterThanOrEqual(15);
    });
  }, 60_000);

  it("a real run writes each timing fact once, from NULL, by the owner of the execution", async () => {
    const t = await freshDb();
    await t.pool.query(TIMING_AUDIT_SQL);
    await withHost(t, silentLogger, async (host) => {
      const row = await runOneJob(t, "audit me");
      expect(row.state).toBe("completed");
      const { rows: writes } = await t.pool.query(
        "SELECT col, was, now_is, owner, epoch, execution_id, state FROM timing_writes WHERE job_id = $1",
        [row.id],
      );
      const byCol = (c: string) => writes.filter((w) => w.col === c);
      for (const col of TIMING.slice(1)) {
        expect(byCol(col), col).toHaveLength(1);
        expect(byCol(col)[0], col).toMatchObject({
          was: null,
          owner: host.id,
          epoch: row.epoch,
          execution_id: row.executionId,
        });
      }
      expect(byCol("created_at")).toHaveLength(0);
      // The start and the terminal write happened in their own states; the two facts rode on a
      // write the run makes anyway: a heartbeat (state running) or the terminal write.
      expect(byCol("started_at")[0].state).toBe("running");
      expect(byCol("finished_at")[0].state).toBe("completed");
      // No row version of this run changed only a timing fact: each one that carried a fact was a
      // heartbeat or the terminal write. (Before, each fact cost an UPDATE of its own.)
      const { rows: versions } = await t.pool.query(
        "SELECT state, heartbeat_changed FROM job_versions WHERE job_id = $1 AND facts_changed ORDER BY at",
        [row.id],
      );
      expect(versions.length).toBeGreaterThanOrEqual(1);
      for (const v of versions)
        expect(v.state === "completed" || (v.state === "running" && v.heartbeat_changed)).toBe(true);
      // Claim, start, terminal write, plus a heartbeat only if one fell inside the run.
      const { rows: all } = await t.pool.query("SELECT count(*)::int AS n FROM job_versions WHERE job_id = $1", [
        row.id,
      ]);
      expect(all[0].n).toBeLessThanOrEqual(4);
      // Postgres' clock, in order, though measured on the host.
      const at = (c: string) => new Date(byCol(c)[0].now_is).getTime();
      expect(at("started_at")).toBeLessThanOrEqual(at("prepared_at"));
      expect(at("prepared_at")).toBeLessThanOrEqual(at("first_output_at"));
      expect(at("first_output_at")).toBeLessThanOrEqual(at("finished_at"));
    });
  }, 60_000);

  it("a fact rides only on the owner's fenced writes, lands once, and is clamped to the run's start", async () => {
    const t = await freshDb();
    const jobId = randomUUID();
    await t.db.insert(schema.jobs).values({ id: jobId, tenantId: TENANT, input: { messages: [] } });
    const token = randomUUID();
    const epoch = await claimJob(t.db, jobId, "owner-a", token);
    const id: ExecutionIdentity = { jobId, host: "owner-a", epoch: epoch!, token, executionId: randomUUID() };
    // An instant from before the start (a host that observed it early, or a slow statement).
    const early = performance.now() - 60_000;
    expect(await markStarted(t.db, id)).toBe(true);
    const stranger: ExecutionIdentity = { ...id, executionId: randomUUID() };
    const read = async () => (await t.db.select().from(schema.jobs).where(eq(schema.jobs.id, jobId)))[0]!;

    expect(await heartbeat(t.db, [{ ...stranger, facts: { prepared_at: early } }])).toEqual(new Set());
    expect((await read()).preparedAt).toBeNull();
    expect(await heartbeat(t.db, [{ ...id, facts: { prepared_at: early } }])).toEqual(new Set([id.executionId]));
    const first = await read();
    expect(first.preparedAt).toEqual(first.executionStartedAt);
    await new Promise((r) => setTimeout(r, 20));
    const out = performance.now();
    await new Promise((r) => setTimeout(r, 20));
    // The terminal write carries both; prepared_at stays, first_output_at lands ~20 ms before it.
    const stale = await finishJobReporting(
      t.db,
      stranger,
      { state: "completed", output: "x" },
      { first_output_at: out },
    );
    expect(stale.written).toBe(false);
    expect((await read()).firstOutputAt).toBeNull();
    const done = await finishJobReporting(
      t.db,
      id,
      { state: "completed", output: "x" },
      { prepared_at: performance.now(), first_output_at: out },
    );
    expect(done.written).toBe(true);
    const last = await read();
    expect(last.preparedAt).toEqual(first.preparedAt);
    const gap = last.finishedAt!.getTime() - last.firstOutputAt!.getTime();
    expect(gap).toBeGreaterThanOrEqual(15);
    expect(gap).toBeLessThan(5000); // generous: a loaded machine may stall the timers
    expect(done.facts).toEqual({
      created_at: last.createdAt,
      started_at: last.startedAt,
      prepared_at: last.preparedAt,
      first_output_at: last.firstOutputAt,
      finished_at: last.finishedAt,
    });
    // After the terminal state no write carries a fact any more, not even for a point still NULL.
    await t.pool.query("UPDATE jobs SET first_output_at = NULL WHERE id = $1", [jobId]);
    expect(await heartbeat(t.db, [{ ...id, facts: { first_output_at: out } }])).toEqual(new Set());
    expect(await finishJob(t.db, id, { state: "completed", output: "y" })).toBe(false);
    expect((await read()).firstOutputAt).toBeNull();
  });

  it("job, list and conversation history serialize latency with the one serializer", async () => {
    const t = await freshDb();
    const conversationId = `c-${randomUUID()}`;
    await withHost(t, silentLogger, async () => {
      await runOneJob(t, "first", conversationId);
      await runOneJob(t, "second", conversationId);
    });
    const rows = await listConversationJobsOldestFirst(t.db, TENANT, conversationId);
    expect(rows).toHaveLength(2);
    const page = await listJobs(t.db, TENANT, { limit: 10 });
    const history = conversationMessages(rows).filter((m) => m.role === "assistant");
    for (const row of rows) {
      const expected = facts(row);
      expect(Object.values(expected).every((v) => typeof v === "number" && v >= 0)).toBe(true);
      expect(toJobView((await getJob(t.db, TENANT, row.id))!).latency).toEqual(expected);
      expect(toJobView(page.jobs.find((j) => j.id === row.id)!).latency).toEqual(expected);
      expect(history.find((m) => m.job_id === row.id)?.latency).toEqual(expected);
    }

    // And in the source: the API routes and the conversation view go through toJobView, and no
    // file but the serializer builds a *_latency_ms value.
    const src = async (p: string) => readFile(join(ROOT, p), "utf8");
    expect(await src("src/db/job-view.ts")).toMatch(/latency: deriveLatency\(/);
    expect(await src("workers/routes/jobs.ts")).toMatch(/jobs: page\.jobs\.map\(toJobView\)/);
    expect(await src("src/db/conversations-repo.ts")).toMatch(/latency: toJobView\(row\)\.latency/);
    const builders: string[] = [];
    for (const dir of ["src", "workers", "sandbox-host"]) {
      for (const f of await readdir(join(ROOT, dir), { recursive: true })) {
        if (f.endsWith(".ts") && /_latency_ms\s*:/.test(await src(join(dir, f)))) builders.push(join(dir, f));
      }
    }
    expect(builders.sort()).toEqual(["src/contracts/job.ts", "src/domain/timing.ts"]);
  }, 60_000);

  it("the hooks the quota, sandbox and cancel wiring will call feed their series", async () => {
    const m = createHostMetrics("hook-test", 60_000);
    try {
      observeQuotaWait(m, { kind: "admitted", waitedMs: 120 });
      observeQuotaWait(m, { kind: "timed_out", reason: "limit_reached", waitedMs: 30_000 });
      m.quotaLeasesHeld.inc();
      m.quotaLeasesLost.inc();
      m.sandboxesActive.set(2);
      expect(await timeSandboxOp(m.sandboxCreate, async () => "made")).toBe("made");
      await expect(
        timeSandboxOp(m.sandboxDelete, async () => {
          throw new Error("docker said no");
        }),
      ).rejects.toThrow("docker said no");
      m.cancelConvergence.observe({ outcome: "cancelled" }, 0.3);
      const text = await m.registry.metrics();
      for (const line of [
        'quota_wait_seconds_count{host="hook-test",outcome="admitted",reason="none"} 1',
        'quota_wait_seconds_sum{host="hook-test",outcome="timed_out",reason="limit_reached"} 30',
        // Never observed, still a series (zeroed at start): an alert needs a zero to rise from.
        'quota_wait_seconds_count{host="hook-test",outcome="timed_out",reason="redis_unavailable"} 0',
        'quota_wait_seconds_count{host="hook-test",outcome="aborted",reason="none"} 0',
        'quota_leases_held{host="hook-test"} 1',
        'quota_leases_lost_total{host="hook-test"} 1',
        'sandboxes_active{host="hook-test"} 2',
        'sandbox_create_seconds_count{host="hook-test",outcome="ok"} 1',
        'sandbox_delete_seconds_count{host="hook-test",outcome="error"} 1',
        'cancel_convergence_seconds_count{host="hook-test",outcome="cancelled"} 1',
      ])
        expect(text).toContain(line);
    } finally {
      m.stop();
    }
  });
});
