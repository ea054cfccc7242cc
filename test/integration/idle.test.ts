/**
 * What an idle host costs, measured on real services: a Postgres with pg_stat_statements loaded
 * (every statement of the host counted under the host's own role, no sampling lag), redis-server
 * behind the Upstash bridge (INFO commandstats counts every command), the mock model. And that
 * going quiet neither slows a job's start on an idle host nor stretches the recovery bounds
 * docs/capacity.md states: a lost run is found within its bound whether the host heard the job's
 * announcement or missed it, and a job whose wake-ups were all lost is still claimed. The cases
 * where every announcement is lost run without sleep (HOST_SLEEP_MAX_MS=0): they bound the idle
 * look, which a sleeping host replaces by its known deadline and HOST_SLEEP_MAX_MS
 * (scale-to-zero.test.ts and docs/deploy.md, "Idle and scale to zero").
 */
import { randomUUID } from "node:crypto";
import { drizzle } from "drizzle-orm/node-postgres";
import type pg from "pg";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { type RunningHost, startHost } from "../../sandbox-host/host";
import { type HostConfig, HostConfigSchema } from "../../sandbox-host/host-config";
import { silentLogger } from "../../sandbox-host/log";
import { createOpenAICompatibleClient } from "../../sandbox-host/model/openai-compatible";
import { createJob } from "../../src/db/jobs-repo";
import * as schema from "../../src/db/schema";
import { createTenant } from "../../src/db/tenants-repo";
import { sleep } from "../../src/domain/async";
import { defaultRunLostAfterMs } from "../../src/domain/recovery";
import { redisKeys } from "../../src/quota/keys";
import { createRedisClient, type Redis } from "../../src/quota/redis";
import { startUpstashBridge, type UpstashBridge } from "../../tools/bridges/upstash-rest/main";
import { RespInfo } from "../../tools/load/resp";
import { MOCK_MODEL_NAME, type MockModel, startMockModel } from "../../tools/mock-model/main";
import { applyMigrations } from "../../tools/stack/migrate";
import { type AckingIngest, startAckingIngest } from "../../tools/stack/services/acking-ingest";
import { waitFor } from "../../tools/stack/services/ports";
import { type PostgresService, startPostgres } from "../../tools/stack/services/postgres";
import { type RedisService, startRedis } from "../../tools/stack/services/redis";
import { testPool } from "../helpers/db";
import { requireBinary } from "../helpers/require";

const canRun = await requireBinary("redis-server", "apt-get install redis-server");

const TOKEN = "idle-test-bridge-token";
const SECRET = "idle-test-signing-secret-0123456789";
const TENANT = "t-idle";
const HOST_ROLE = "ear_idle_host";

let pgs: PostgresService;
let admin: pg.Pool;
let redisService: RedisService;
let bridge: UpstashBridge;
let mock: MockModel;
let ingest: AckingIngest;
let redis: Redis;
let info: RespInfo;
let dbCount = 0;
const cleanups: Array<() => Promise<unknown>> = [];

beforeAll(async () => {
  if (!canRun) return;
  [pgs, redisService, mock, ingest] = await Promise.all([
    startPostgres({ settings: { shared_preload_libraries: "pg_stat_statements", "pg_stat_statements.track": "all" } }),
    startRedis(),
    startMockModel(),
    startAckingIngest(),
  ]);
  admin = testPool(pgs.url, 2);
  await admin.query("CREATE EXTENSION pg_stat_statements");
  // The host connects as its own role: pg_stat_statements keys its counts by user.
  await admin.query(`CREATE ROLE ${HOST_ROLE} LOGIN SUPERUSER PASSWORD 'idle'`);
  bridge = await startUpstashBridge({ redisUrl: redisService.url, token: TOKEN, log: () => {} });
  redis = createRedisClient({ url: bridge.url, token: TOKEN });
  info = new RespInfo(redisService.url);
}, 60_000);

afterEach(async () => {
  for (const fn of cleanups.splice(0).reverse()) await fn().catch(() => {});
});

afterAll(async () => {
  info?.close();
  await bridge?.close();
  await admin?.end().catch(() => {});
  await Promise.all([pgs?.stop(), redisService?.stop(), mock?.close(), ingest?.close()]);
});

/** A fresh migrated database with the tenant; `pool` and `db` run as the test (postgres). */
async function freshDb(): Promise<{ name: string; pool: pg.Pool; db: ReturnType<typeof drizzle<typeof schema>> }> {
  const name = `ear_idle_${++dbCount}`;
  await admin.query(`CREATE DATABASE ${name}`);
  await applyMigrations(pgs.url.replace(/\/postgres$/, `/${name}`));
  const pool = testPool(pgs.url.replace(/\/postgres$/, `/${name}`), 2);
  cleanups.push(() => pool.end());
  const db = drizzle(pool, { schema });
  await createTenant(db, TENANT);
  return { name, pool, db };
}

function hostConfig(dbName: string, over: Partial<HostConfig> = {}): HostConfig {
  return HostConfigSchema.parse({
    hostId: `idle-host-${randomUUID().slice(0, 8)}`,
    databaseUrl: `postgres://${HOST_ROLE}:idle@127.0.0.1:${pgs.port}/${dbName}`,
    redis: { url: bridge.url, token: TOKEN },
    gatewayUrl: ingest.url,
    signingSecret: SECRET,
    ...over,
  });
}

async function launch(config: HostConfig): Promise<RunningHost> {
  const model = createOpenAICompatibleClient({ baseUrl: mock.url, apiKey: "mock", model: MOCK_MODEL_NAME });
  const host = await startHost(config, { model, log: silentLogger, sandbox: null });
  cleanups.push(() => host.close({ graceMs: 0 }));
  return host;
}

/** Statements the host's role has run so far, per statement text. */
async function hostStatements(): Promise<Map<string, number>> {
  const { rows } = await admin.query<{ query: string; calls: string }>(
    `SELECT s.query, s.calls::text AS calls FROM pg_stat_statements s JOIN pg_roles r ON r.oid = s.userid
      WHERE r.rolname = $1`,
    [HOST_ROLE],
  );
  const out = new Map<string, number>();
  for (const r of rows) out.set(r.query, (out.get(r.query) ?? 0) + Number(r.calls));
  return out;
}

/** Redis commands served so far, per command (the test's own INFO left out). */
async function redisCommands(): Promise<Map<string, number>> {
  const out = new Map<string, number>();
  for (const [k, v] of Object.entries(await info.info("commandstats"))) {
    const name = k.replace(/^cmdstat_/, "");
    if (name === "info") continue;
    out.set(name, Number(/calls=(\d+)/.exec(v)?.[1] ?? 0));
  }
  return out;
}

function delta(after: Map<string, number>, before: Map<string, number>): Map<string, number> {
  const out = new Map<string, number>();
  for (const [k, v] of after) if (v - (before.get(k) ?? 0) > 0) out.set(k, v - (before.get(k) ?? 0));
  return out;
}
const total = (m: Map<string, number>) => [...m.values()].reduce((a, b) => a + b, 0);

async function fleetIdle(host: RunningHost): Promise<boolean> {
  const text = await (await fetch(host.metricsUrl)).text();
  return /^host_fleet_idle(\{[^}]*\})? 1$/m.test(text);
}

async function enqueue(db: ReturnType<typeof drizzle<typeof schema>>): Promise<string> {
  const id = randomUUID();
  await createJob(db, TENANT, id, { input: { messages: [{ role: "user", content: "hello" }] } });
  await redis.zadd(redisKeys().readyIndex(), { score: Date.now(), member: id });
  return id;
}

describe.skipIf(!canRun)("an idle host", () => {
  it("sends at most 0.1 Postgres statements/s and 0.1 Redis commands/s once idle", async () => {
    const { name } = await freshDb();
    await launch(hostConfig(name));
    // Start-up passes (the first reaper pass, the first queue-depth sample, the listener's
    // LISTEN) are not idle cost.
    await sleep(8000);
    const pg0 = await hostStatements();
    const redis0 = await redisCommands();
    const windowS = 30;
    await sleep(windowS * 1000);
    const statements = delta(await hostStatements(), pg0);
    const commands = delta(await redisCommands(), redis0);
    const short = (m: Map<string, number>) =>
      Object.fromEntries([...m].map(([k, v]) => [k.replace(/\s+/g, " ").slice(0, 60), v]));
    const detail = JSON.stringify({ statements: short(statements), commands: short(commands) });
    console.log(`idle host, ${windowS} s: ${detail}`);
    expect(total(statements), detail).toBeLessThanOrEqual(0.1 * windowS);
    expect(total(commands), detail).toBeLessThanOrEqual(0.1 * windowS);
  }, 60_000);

  it("still starts a job within milliseconds of its enqueue (the LISTEN wake-up)", async () => {
    const { name, pool, db } = await freshDb();
    const host = await launch(hostConfig(name));
    const latencies: number[] = [];
    for (let i = 0; i < 5; i++) {
      await waitIdle(host);
      const id = await enqueue(db);
      const ms = await waitFor(
        "the job to finish",
        async () => {
          const { rows } = await pool.query<{ ms: number | null; state: string }>(
            "SELECT extract(epoch FROM started_at - created_at) * 1000 AS ms, state FROM jobs WHERE id = $1",
            [id],
          );
          return rows[0]?.state === "completed" ? { ms: Number(rows[0].ms) } : null;
        },
        { timeoutMs: 20_000 },
      );
      latencies.push(ms.ms);
    }
    // Idle loops sleep for a minute: only the wake-up can start a job this fast. 50 ms is the
    // target on a quiet machine (npm run bench:idle); this bound leaves room for a loaded one.
    expect(Math.max(...latencies), JSON.stringify(latencies)).toBeLessThan(500);
  }, 150_000);

  it("finds a lost run within the busy bound when it heard the job announced", async () => {
    const { name, pool } = await freshDb();
    const config = hostConfig(name);
    const host = await launch(config);
    await waitIdle(host);
    // Another host inserts, claims and starts a job in one transaction, then dies: this host hears
    // the insert's announcement at the commit but never wins the job.
    const id = await startedByDeadHost(pool);
    const committed = Date.now();
    await waitLost(pool, id, 30_000);
    const bound = defaultRunLostAfterMs(config.heartbeatMs) + config.reapMs * 1.3;
    expect(Date.now() - committed).toBeLessThan(bound + SLACK_MS);
  }, 60_000);

  it("finds a lost run within the idle bound when every announcement was missed", async () => {
    const { name, pool } = await freshDb();
    const config = hostConfig(name, { idleMs: 5000, sleepMaxMs: 0 });
    const host = await launch(config);
    await waitIdle(host);
    // The announcements are lost (triggers off): only the idle host's own pass can find the run.
    await pool.query("ALTER TABLE jobs DISABLE TRIGGER jobs_ready_notify_insert");
    const id = await startedByDeadHost(pool);
    const committed = Date.now();
    await waitLost(pool, id, 40_000);
    const bound = config.idleMs * 1.3 + defaultRunLostAfterMs(config.heartbeatMs) + config.reapMs * 1.3;
    expect(Date.now() - committed).toBeLessThan(bound + SLACK_MS);
  }, 60_000);

  it("ends a wait past its approval deadline within the idle bound (waiting jobs are not work)", async () => {
    const { name, pool } = await freshDb();
    const config = hostConfig(name, { idleMs: 5000, sleepMaxMs: 0 });
    const host = await launch(config);
    await waitIdle(host);
    // A job suspended by a host that is gone: nobody holds it, nothing announces its deadline
    // (and its insert here announces nothing either, as a suspension would not).
    await pool.query("ALTER TABLE jobs DISABLE TRIGGER jobs_ready_notify_insert");
    const id = randomUUID();
    await pool.query(
      `INSERT INTO jobs (id, tenant_id, input, state, epoch, wait_deadline_at, waiting_for)
       VALUES ($1, $2, '{"messages":[]}', 'waiting', 1, now() + interval '1 second',
         '{"kind":"approval","call_id":"c1","tool":"shell","on_deadline":"fail"}')`,
      [id, TENANT],
    );
    const due = Date.now() + 1000;
    await waitFor(
      "the wait to end",
      async () => {
        const { rows } = await pool.query<{ state: string; error: { code: string } | null }>(
          "SELECT state, error FROM jobs WHERE id = $1",
          [id],
        );
        return rows[0]?.state === "failed" ? rows[0] : null;
      },
      { timeoutMs: 30_000, intervalMs: 50 },
    ).then((row) => expect(row.error?.code).toBe("approval_expired"));
    expect(Date.now() - due).toBeLessThan(config.idleMs * 1.3 + config.reapMs * 1.3 + SLACK_MS);
  }, 60_000);

  it("claims a job whose announcement and ready-index entry were both lost within the idle bound", async () => {
    const { name, pool, db } = await freshDb();
    const config = hostConfig(name, { idleMs: 5000, sleepMaxMs: 0 });
    const host = await launch(config);
    await waitIdle(host);
    await pool.query("ALTER TABLE jobs DISABLE TRIGGER jobs_ready_notify_insert");
    const id = randomUUID();
    await createJob(db, TENANT, id, { input: { messages: [{ role: "user", content: "hello" }] } });
    const inserted = Date.now();
    await waitFor(
      "the job to start",
      async () => {
        const { rows } = await pool.query<{ started_at: Date | null }>("SELECT started_at FROM jobs WHERE id = $1", [
          id,
        ]);
        return rows[0]?.started_at ? true : null;
      },
      { timeoutMs: 40_000 },
    );
    // Found by the idle pass (HOST_IDLE_MS), then the sweep takes jobs older than its age limit.
    const bound = config.idleMs * 1.3 + config.sweepOlderThanMs + config.sweepMs * 1.3;
    expect(Date.now() - inserted).toBeLessThan(bound + SLACK_MS);
  }, 60_000);
});

/** Room for a loaded 2-core machine beyond the documented bound. */
const SLACK_MS = 2000;

async function waitIdle(host: RunningHost): Promise<void> {
  await waitFor("the host to call the fleet idle", async () => ((await fleetIdle(host)) ? true : null), {
    timeoutMs: 20_000,
  });
}

/** A job inserted, claimed and started by a host that then died (one transaction, one commit), its recoveries used up (the default allows 3), so the reaper ends it `lost`, not recovered (recovery.test.ts has those). */
async function startedByDeadHost(pool: pg.Pool): Promise<string> {
  const id = randomUUID();
  const client = await pool.connect();
  try {
    await client.query("BEGIN");
    await client.query(`INSERT INTO jobs (id, tenant_id, input, recoveries) VALUES ($1, $2, '{"messages":[]}', 3)`, [
      id,
      TENANT,
    ]);
    await client.query(
      `UPDATE jobs SET state = 'running', owner = 'dead-host', claimed_at = now(), epoch = 1,
         token = gen_random_uuid(), execution_id = gen_random_uuid(), execution_started_at = now(),
         started_at = now(), heartbeat_at = now()
       WHERE id = $1`,
      [id],
    );
    await client.query("COMMIT");
  } finally {
    client.release();
  }
  return id;
}

async function waitLost(pool: pg.Pool, id: string, timeoutMs: number): Promise<void> {
  await waitFor(
    "the run to be called lost",
    async () => {
      const { rows } = await pool.query<{ state: string }>("SELECT state FROM jobs WHERE id = $1", [id]);
      return rows[0]?.state === "lost" ? true : null;
    },
    { timeoutMs, intervalMs: 50 },
  );
}
