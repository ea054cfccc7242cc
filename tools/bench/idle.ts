/**
 * `npm run bench:idle [-- --minutes M --hosts H --jobs N --warmup-s S]`: what an idle fleet costs,
 * and how fast an idle host still starts a job. Figures and their reading live in docs/capacity.md.
 *
 * Started here: embedded Postgres 18 with pg_stat_statements loaded, redis-server behind the local
 * Upstash bridge (one bridge per host, so each host's REST requests are counted apart), the mock
 * model, an acking ingest, and H real sandbox-host processes (default 2) with their default
 * settings. No gateway: it would add its own Redis and Postgres traffic (its cron backstop) to
 * what is measured here per host; the bench enqueues the way the gateway's submit does.
 *
 *  1. Idle cost: after a warm-up (S seconds, default 30: start-up passes), M minutes (default 10)
 *     of nothing; per host:
 *     - Postgres statements/s from pg_stat_statements (calls), each host connecting as its own
 *       role so the view's per-user rows attribute every statement to one host, LISTEN included.
 *       pg_stat_database's xact_commit counts transactions for the whole database (every host
 *       and this bench's reads), lags up to the stats flush interval and cannot say which host
 *       or which statement: it is printed as a cross-check only.
 *     - Redis commands/s from Redis INFO commandstats (every command, whoever sent it; the
 *       bench's own INFO is left out) split per host by the host's bridge's request count (a host
 *       sends one command per request when idle; a pipeline would count once there).
 *     The statements and commands behind the rates are listed, most frequent first.
 *  2. Wake-up: N jobs (default 20) enqueued one at a time, each only once every host reports
 *     itself idle again (`host_fleet_idle` on /metrics; hosts without that gauge get 3 s), and
 *     each finished before the next; enqueue→started is started_at − created_at, both Postgres
 *     clock readings of the same row (the INSERT's transaction start, the started CAS).
 * The load average is printed next to the figures: on a shared machine they are noisy.
 */
import { randomUUID } from "node:crypto";
import { availableParallelism } from "node:os";
import { resolve } from "node:path";
import { Redis as Upstash } from "@upstash/redis";
import { drizzle } from "drizzle-orm/node-postgres";
import pg from "pg";
import { createJob } from "../../src/db/jobs-repo";
import * as schema from "../../src/db/schema";
import { createTenant } from "../../src/db/tenants-repo";
import { sleep } from "../../src/domain/async";
import { redisKeys } from "../../src/quota/keys";
import { startUpstashBridge, type UpstashBridge } from "../bridges/upstash-rest/main";
import { RespInfo } from "../load/resp";
import { MOCK_MODEL_NAME, startMockModel } from "../mock-model/main";
import { applyMigrations } from "../stack/migrate";
import { startAckingIngest } from "../stack/services/acking-ingest";
import { startPostgres } from "../stack/services/postgres";
import { startRedis } from "../stack/services/redis";
import { type HostHandle, spawnHost } from "../stack/start";
import { dist, loadAverage, pct, startBench } from "./harness";

const bench = startBench({
  usage: "npm run bench:idle -- [--minutes 10] [--hosts 2] [--jobs 20] [--warmup-s 30] [--json]",
  options: {
    minutes: { type: "string" },
    hosts: { type: "string" },
    jobs: { type: "string" },
    "warmup-s": { type: "string" },
  },
});
const values = bench.args;
const MINUTES = Number(values.minutes ?? 10);
const HOSTS = Number(values.hosts ?? 2);
const JOBS = Number(values.jobs ?? 20);
const WARMUP_S = Number(values["warmup-s"] ?? 30);
const TENANT = "bench-idle";
const TOKEN = "bench-idle-bridge-token";
const SECRET = "bench-idle-signing-secret-0123456789";
const ROLE_PASSWORD = "bench";
/** Commands of this bench's own Redis connection (RespInfo), not the hosts'. */
const OWN_COMMANDS = new Set(["info", "client", "command", "hello", "select", "ping"]);

const load = () => loadAverage().join(" / ");

interface PgSnapshot {
  /** Per host role: queryid → calls, plus the statement's text. */
  byRole: Map<string, Map<string, { calls: number; query: string }>>;
  xacts: number;
}

async function pgSnapshot(admin: pg.Pool, roles: string[]): Promise<PgSnapshot> {
  const { rows } = await admin.query<{ role: string; queryid: string; calls: string; query: string }>(
    `SELECT r.rolname AS role, s.queryid::text AS queryid, s.calls::text AS calls, s.query
       FROM pg_stat_statements s JOIN pg_roles r ON r.oid = s.userid
      WHERE r.rolname = ANY($1)`,
    [roles],
  );
  const byRole = new Map(roles.map((r) => [r, new Map<string, { calls: number; query: string }>()]));
  for (const r of rows) {
    const m = byRole.get(r.role) as Map<string, { calls: number; query: string }>;
    const had = m.get(r.queryid);
    m.set(r.queryid, { calls: (had?.calls ?? 0) + Number(r.calls), query: r.query });
  }
  const x = await admin.query<{ n: string }>(
    "SELECT (xact_commit + xact_rollback)::text AS n FROM pg_stat_database WHERE datname = 'ear'",
  );
  return { byRole, xacts: Number(x.rows[0]?.n ?? 0) };
}

async function commandStats(info: RespInfo): Promise<Map<string, number>> {
  const out = new Map<string, number>();
  for (const [k, v] of Object.entries(await info.info("commandstats"))) {
    const name = k.replace(/^cmdstat_/, "");
    if (OWN_COMMANDS.has(name.split("|")[0] as string)) continue;
    out.set(name, Number(/calls=(\d+)/.exec(v)?.[1] ?? 0));
  }
  return out;
}

const bridgeRequests = (b: UpstashBridge) => {
  const s = b.stats();
  return s.command + s.pipeline + s.multiExec;
};

async function hostIdle(h: HostHandle): Promise<boolean | null> {
  const text = await (await fetch(h.metricsUrl)).text();
  const m = /^host_fleet_idle(?:\{[^}]*\})? (\d+)/m.exec(text);
  return m ? m[1] === "1" : null;
}

async function main(): Promise<void> {
  const cleanups: Array<() => Promise<unknown>> = [];
  try {
    console.error(`bench:idle — starting Postgres, Redis, ${HOSTS} bridges, the mock model…`);
    const pgs = await startPostgres({
      settings: { shared_preload_libraries: "pg_stat_statements", "pg_stat_statements.track": "all" },
    });
    cleanups.push(() => pgs.stop());
    const server = new pg.Pool({ connectionString: pgs.url, max: 2 });
    server.on("error", () => {});
    cleanups.push(() => server.end());
    await server.query("CREATE DATABASE ear");
    const dbUrl = (user: string, password: string) => `postgres://${user}:${password}@127.0.0.1:${pgs.port}/ear`;
    await applyMigrations(pgs.url.replace(/\/postgres$/, "/ear"));
    await server.query("CREATE EXTENSION IF NOT EXISTS pg_stat_statements");
    const roles = Array.from({ length: HOSTS }, (_, i) => `ear_host_${i + 1}`);
    // A role per host: pg_stat_statements keys its rows by user, which is how statements are told
    // apart per host. Superuser keeps the bench free of grants; the hosts' SQL is unchanged.
    for (const r of roles) await server.query(`CREATE ROLE ${r} LOGIN SUPERUSER PASSWORD '${ROLE_PASSWORD}'`);
    const pool = new pg.Pool({ connectionString: pgs.url.replace(/\/postgres$/, "/ear"), max: 2 });
    pool.on("error", () => {});
    cleanups.push(() => pool.end());
    const db = drizzle(pool, { schema });
    await createTenant(db, TENANT, "bench:idle");

    const redis = await startRedis();
    cleanups.push(() => redis.stop());
    const bridges: UpstashBridge[] = [];
    for (let i = 0; i <= HOSTS; i++) {
      const b = await startUpstashBridge({ redisUrl: redis.url, token: TOKEN, log: () => {} });
      bridges.push(b);
      cleanups.push(() => b.close());
    }
    // The last bridge is the bench's own (the enqueue's ZADD), never counted.
    const benchRedis = new Upstash({ url: (bridges[HOSTS] as UpstashBridge).url, token: TOKEN });
    const mock = await startMockModel();
    cleanups.push(() => mock.close());
    const ingest = await startAckingIngest();
    cleanups.push(() => ingest.close());

    const hosts: HostHandle[] = [];
    for (let i = 0; i < HOSTS; i++) {
      const h = await spawnHost(resolve(import.meta.dirname, "../.."), {
        HOST_ID: `idle-host-${i + 1}`,
        DATABASE_URL: dbUrl(roles[i] as string, ROLE_PASSWORD),
        UPSTASH_REDIS_REST_URL: (bridges[i] as UpstashBridge).url,
        UPSTASH_REDIS_REST_TOKEN: TOKEN,
        GATEWAY_URL: ingest.url,
        INTERNAL_SIGNING_SECRET: SECRET,
        MODEL_BASE_URL: mock.url,
        MODEL_API_KEY: "mock",
        MODEL_NAME: MOCK_MODEL_NAME,
        HOST_METRICS_PORT: "0",
      });
      hosts.push(h);
      cleanups.push(() => h.stop());
    }
    console.error(`${HOSTS} hosts up; warming up ${WARMUP_S} s, then ${MINUTES} idle minutes…`);
    await sleep(WARMUP_S * 1000);

    const info = new RespInfo(redis.url);
    cleanups.push(async () => info.close());
    const load0 = load();
    const pg0 = await pgSnapshot(server, roles);
    const redis0 = await commandStats(info);
    const req0 = bridges.slice(0, HOSTS).map(bridgeRequests);
    const t0 = performance.now();
    await sleep(MINUTES * 60_000);
    const seconds = (performance.now() - t0) / 1000;
    const pg1 = await pgSnapshot(server, roles);
    const redis1 = await commandStats(info);
    const req1 = bridges.slice(0, HOSTS).map(bridgeRequests);
    const load1 = load();

    const redisTotal = [...redis1].reduce((n, [k, v]) => n + v - (redis0.get(k) ?? 0), 0);
    const reqTotal = req1.reduce((n, v, i) => n + v - (req0[i] as number), 0);
    bench.say(
      `\nbench:idle — ${HOSTS} idle hosts, ${seconds.toFixed(0)} s window after ${WARMUP_S} s warm-up; ` +
        `${availableParallelism()} cores; load average (1/5/15 min) ${load0} at the start, ${load1} at the end\n`,
    );
    bench.say("| host | Postgres statements/s | Redis commands/s |");
    bench.say("|---|---|---|");
    const pgRates: number[] = [];
    const redisRates: number[] = [];
    for (let i = 0; i < HOSTS; i++) {
      const role = roles[i] as string;
      const before = pg0.byRole.get(role) as Map<string, { calls: number }>;
      let calls = 0;
      for (const [q, s] of pg1.byRole.get(role) as Map<string, { calls: number }>)
        calls += s.calls - (before.get(q)?.calls ?? 0);
      const share = reqTotal === 0 ? 0 : ((req1[i] as number) - (req0[i] as number)) / reqTotal;
      pgRates.push(calls / seconds);
      redisRates.push((redisTotal * share) / seconds);
      bench.say(
        `| ${hosts[i]?.id} | ${(calls / seconds).toFixed(3)} | ${((redisTotal * share) / seconds).toFixed(3)} |`,
      );
    }
    bench.say(
      `\ncross-check: pg_stat_database xact_commit+rollback on the database: ${((pg1.xacts - pg0.xacts) / seconds).toFixed(3)}/s for all ${HOSTS} hosts (and this bench's reads); ` +
        `Redis commands (INFO commandstats): ${(redisTotal / seconds).toFixed(3)}/s; bridge requests: ${(reqTotal / seconds).toFixed(3)}/s`,
    );
    bench.say("\nPostgres statements in the window (all hosts):");
    const stmts = new Map<string, number>();
    for (const role of roles) {
      const before = pg0.byRole.get(role) as Map<string, { calls: number }>;
      for (const [q, s] of pg1.byRole.get(role) as Map<string, { calls: number; query: string }>) {
        const d = s.calls - (before.get(q)?.calls ?? 0);
        const text = s.query.replace(/\s+/g, " ").slice(0, 90);
        if (d > 0) stmts.set(text, (stmts.get(text) ?? 0) + d);
      }
    }
    for (const [text, n] of [...stmts].sort((a, b) => b[1] - a[1])) bench.say(`  ${String(n).padStart(6)}  ${text}`);
    bench.say("Redis commands in the window (all hosts):");
    for (const [k, v] of [...redis1].sort((a, b) => b[1] - a[1])) {
      const d = v - (redis0.get(k) ?? 0);
      if (d > 0) bench.say(`  ${String(d).padStart(6)}  ${k}`);
    }

    // Wake-up latency on idle hosts.
    const latencies: number[] = [];
    for (let j = 0; j < JOBS; j++) {
      const idleSince = Date.now();
      while (Date.now() - idleSince < 60_000) {
        const states = await Promise.all(hosts.map(hostIdle));
        if (states.every((s) => s === true)) break;
        if (states.some((s) => s === null)) {
          await sleep(3000);
          break;
        }
        await sleep(100);
      }
      const id = randomUUID();
      await createJob(db, TENANT, id, { input: { messages: [{ role: "user", content: "hello" }] } });
      await benchRedis.zadd(redisKeys().readyIndex(), { score: Date.now(), member: id });
      const deadline = Date.now() + 30_000;
      let started: number | null = null;
      for (;;) {
        const { rows } = await pool.query<{ ms: number | null; state: string }>(
          `SELECT extract(epoch FROM started_at - created_at) * 1000 AS ms, state FROM jobs WHERE id = $1`,
          [id],
        );
        const row = rows[0];
        if (row?.ms !== null && row?.ms !== undefined) started ??= Number(row.ms);
        if (row && ["completed", "failed", "cancelled", "lost", "timed_out"].includes(row.state)) break;
        if (Date.now() > deadline) throw new Error(`job ${id} did not finish in 30 s (state ${row?.state})`);
        await sleep(10);
      }
      if (started === null) throw new Error(`job ${id} finished without started_at`);
      latencies.push(started);
    }
    bench.say(
      `\nenqueue→started on an idle host, ${JOBS} jobs one at a time: p50 ${pct(latencies, 50).toFixed(1)} ms, ` +
        `p95 ${pct(latencies, 95).toFixed(1)} ms, max ${Math.max(...latencies).toFixed(1)} ms; load average ${load()}`,
    );
    // The first job came after the whole idle window: longer than the hosts' pool keeps an unused
    // connection open (idleTimeoutMillis, host-parts.ts), so it shows what a long idle costs.
    bench.say(`  the first of them, after the ${MINUTES}-minute idle window: ${latencies[0]?.toFixed(1)} ms`);
    bench.say(
      `\nsummary: ${Math.max(...pgRates).toFixed(3)} Postgres statements/s and ${Math.max(...redisRates).toFixed(3)} Redis commands/s per idle host (worst host); ` +
        `wake-up p95 ${pct(latencies, 95).toFixed(1)} ms`,
    );
    bench.done({
      minutes: MINUTES,
      hosts: HOSTS,
      postgres_statements_per_s: pgRates,
      redis_commands_per_s: redisRates,
      enqueue_to_started_ms: dist(latencies),
      first_after_idle_ms: latencies[0] ?? null,
    });
  } finally {
    for (const fn of cleanups.reverse()) await fn().catch(() => {});
  }
}

main().then(
  () => process.exit(0),
  (err: unknown) => {
    console.error(err);
    process.exit(1);
  },
);
