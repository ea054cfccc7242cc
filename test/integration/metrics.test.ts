/**
 * What a host's /metrics shows, and the five run timing facts behind the phase histograms:
 * each written once, only by the current owner, a failed timing write logged and never failing
 * the run, and every API view of a run using the one serializer (src/domain/timing.ts).
 * Real Postgres (one cloned database per test), Redis through the Upstash bridge, the mock model.
 */
import { randomUUID } from "node:crypto";
import { readdir, readFile } from "node:fs/promises";
import { join, resolve } from "node:path";
import { eq } from "drizzle-orm";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { HostConfigSchema } from "../../sandbox-host/config";
import { type RunningHost, startHost } from "../../sandbox-host/host";
import { createLogger, type Logger, silentLogger } from "../../sandbox-host/log";
import { createHostMetrics, observeQuotaWait, timeSandboxOp } from "../../sandbox-host/metrics/metrics";
import { createOpenAICompatibleClient } from "../../sandbox-host/model/openai-compatible";
import { conversationMessages, listConversationJobsOldestFirst } from "../../src/db/conversations-repo";
import { toJobView } from "../../src/db/job-view";
import { getJob, listJobs } from "../../src/db/jobs-repo";
import { claimJob, type ExecutionIdentity, finishJob, markStarted, setTimingFact } from "../../src/db/ownership-repo";
import * as schema from "../../src/db/schema";
import { deriveLatency } from "../../src/domain/timing";
import { MOCK_MODEL_NAME, type MockModel } from "../../tools/mock-model";
import { waitFor } from "../../tools/services/ports";
import type { UpstashBridge } from "../../tools/upstash-bridge";
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
  CREATE FUNCTION audit_timing() RETURNS trigger LANGUAGE plpgsql AS $$
  BEGIN
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
        "SELECT col, was, owner, epoch, execution_id, state FROM timing_writes WHERE job_id = $1",
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
      // All but the terminal write happened while the row said `running`.
      for (const col of ["started_at", "prepared_at", "first_output_at"]) expect(byCol(col)[0].state).toBe("running");
      expect(byCol("finished_at")[0].state).toBe("completed");
    });
  }, 60_000);

  it("a second write, or a write by any other identity, hits zero rows and leaves the fact as it was", async () => {
    const t = await freshDb();
    const jobId = randomUUID();
    await t.db.insert(schema.jobs).values({ id: jobId, tenantId: TENANT, input: { messages: [] } });
    const token = randomUUID();
    const epoch = await claimJob(t.db, jobId, "owner-a", token);
    const id: ExecutionIdentity = { jobId, host: "owner-a", epoch: epoch!, token, executionId: randomUUID() };
    expect(await markStarted(t.db, id)).toBe(true);
    const stranger: ExecutionIdentity = { ...id, executionId: randomUUID() };
    const read = async () => (await t.db.select().from(schema.jobs).where(eq(schema.jobs.id, jobId)))[0]!;

    for (const point of ["prepared_at", "first_output_at"] as const) {
      expect(await setTimingFact(t.db, stranger, point), `${point} by a stranger`).toBe(false);
      expect(await setTimingFact(t.db, id, point), point).toBe(true);
    }
    const first = await read();
    await new Promise((r) => setTimeout(r, 20));
    expect(await markStarted(t.db, id)).toBe(false);
    for (const point of ["prepared_at", "first_output_at"] as const)
      expect(await setTimingFact(t.db, id, point), `${point} again`).toBe(false);
    expect(await finishJob(t.db, stranger, { state: "completed", output: "x" })).toBe(false);
    expect(await finishJob(t.db, id, { state: "completed", output: "x" })).toBe(true);
    expect(await finishJob(t.db, id, { state: "completed", output: "y" })).toBe(false);
    const last = await read();
    expect([last.createdAt, last.startedAt, last.preparedAt, last.firstOutputAt]).toEqual([
      first.createdAt,
      first.startedAt,
      first.preparedAt,
      first.firstOutputAt,
    ]);
    expect(last.output).toBe("x");
    // After the terminal state no timing write lands, not even for a point still NULL.
    await t.pool.query("UPDATE jobs SET first_output_at = NULL WHERE id = $1", [jobId]);
    expect(await setTimingFact(t.db, id, "first_output_at")).toBe(false);
  });

  it("a failing timing write logs a warning and never fails the run; the missing phases stay null", async () => {
    const t = await freshDb();
    await t.pool.query(`
      CREATE FUNCTION refuse_timing() RETURNS trigger LANGUAGE plpgsql AS $$
      BEGIN RAISE EXCEPTION 'injected timing failure'; END $$;
      CREATE TRIGGER refuse_timing BEFORE UPDATE OF prepared_at, first_output_at ON jobs
        FOR EACH ROW EXECUTE FUNCTION refuse_timing();`);
    const lines: string[] = [];
    const log = createLogger({}, (l) => lines.push(l));
    await withHost(t, log, async (host) => {
      const row = await runOneJob(t, "timing fails");
      expect(row).toMatchObject({ state: "completed", output: "Echo: timing fails" });
      expect(row.preparedAt).toBeNull();
      expect(row.firstOutputAt).toBeNull();
      const warnings = lines.map((l) => JSON.parse(l)).filter((l) => l.msg === "timing fact write failed");
      expect(warnings.map((w) => [w.level, w.point, w.job_id])).toEqual([
        ["warn", "prepared_at", row.id],
        ["warn", "first_output_at", row.id],
      ]);
      expect(warnings[0].error).toMatch(/prepared_at/); // the failed statement, wrapped by drizzle
      const latency = toJobView(row).latency;
      expect(latency).toMatchObject({
        preparation_latency_ms: null,
        model_first_output_latency_ms: null,
        first_output_latency_ms: null,
      });
      expect(latency.total_latency_ms).not.toBeNull();
      const counts = await samples(host.metricsUrl, "run_phase_seconds_count");
      const count = (phase: string) => counts.find((s) => s.labels.includes(`phase="${phase}"`))?.value;
      expect([count("dispatch"), count("total")]).toEqual([1, 1]);
      expect([count("preparation"), count("model_first_output")]).toEqual([undefined, undefined]);
      expect(await samples(host.metricsUrl, "runs_finished_total")).toEqual([
        expect.objectContaining({ labels: expect.stringContaining('outcome="completed"'), value: 1 }),
      ]);
    });
  }, 60_000);

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
