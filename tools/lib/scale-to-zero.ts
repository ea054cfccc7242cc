/**
 * What a sleeping fleet sends Postgres and Redis, and how fast it wakes: the measurement behind
 * `npm run bench:scale-to-zero` (the full 5 minutes Neon waits before suspending a compute) and
 * test/integration/scale-to-zero.test.ts (a short window, so CI stays fast). Real processes:
 * embedded Postgres with pg_stat_statements, redis-server behind the Upstash bridge, the mock
 * model, an acking ingest, H sandbox-host processes on their defaults but for the overrides given.
 *
 *  1. One job runs (the fleet has done work), then every host is waited for until it reports
 *     itself asleep (`host_fleet_asleep` 1 on /metrics).
 *  2. Every other session on the hosts' database is terminated (pg_terminate_backend): what a
 *     compute suspend does to idle connections.
 *  3. For the window: Postgres statements of the hosts' roles (pg_stat_statements), transactions
 *     and sessions of the hosts' database (pg_stat_database xact_commit + xact_rollback, sessions;
 *     this observer stays connected to another database so it is never counted, and autovacuum is
 *     off so its workers' transactions are not either), and Redis
 *     commands (INFO commandstats, the observer's own INFO left out).
 *  4. One job is submitted the way the gateway does (the row, then the ready-index command that
 *     pokes sleepers): enqueue→started from the row's own timestamps (Postgres clock).
 */
import { randomUUID } from "node:crypto";
import { loadavg } from "node:os";
import { resolve } from "node:path";
import { drizzle } from "drizzle-orm/node-postgres";
import pg from "pg";
import { createJob } from "../../src/db/jobs-repo";
import * as schema from "../../src/db/schema";
import { createTenant } from "../../src/db/tenants-repo";
import { sleep } from "../../src/domain/async";
import { indexAndWake } from "../../src/quota/fleet-wake";
import { redisKeys } from "../../src/quota/keys";
import { createRedisClient } from "../../src/quota/redis";
import { startUpstashBridge, type UpstashBridge } from "../bridges/upstash-rest/main";
import { RespInfo } from "../load/resp";
import { MOCK_MODEL_NAME, startMockModel } from "../mock-model/main";
import { applyMigrations } from "../stack/migrate";
import { startAckingIngest } from "../stack/services/acking-ingest";
import { startPostgres } from "../stack/services/postgres";
import { startRedis } from "../stack/services/redis";
import { type HostHandle, spawnHost } from "../stack/start";

const loadAverage = () => loadavg().map((l) => Math.round(l * 100) / 100);

export interface ScaleToZeroOptions {
  hosts: number;
  windowMs: number;
  /** Extra host environment (HOST_WAKE_POLL_MS, …). */
  hostEnv?: Record<string, string>;
  /** Progress lines (stderr in the bench). */
  progress?: (line: string) => void;
}

export interface ScaleToZeroResult {
  hosts: number;
  windowS: number;
  /** Sessions pg_terminate_backend ended before the window (the hosts' kept pool connections, LISTEN none). */
  terminated: number;
  statements: number;
  statementTexts: Record<string, number>;
  transactions: number;
  sessions: number;
  /**
   * Sessions on the hosts' database at the window's end (pg_stat_activity): all were terminated
   * at its start, so any is a new one. pg_stat_database counts a session only once its backend
   * flushes its stats (up to ~10 s late when idle); this one cannot lag.
   */
  liveSessions: number;
  redisCommands: number;
  redisByCommand: Record<string, number>;
  /** Enqueue→started of the job submitted after the window (started_at − created_at). */
  wakeMs: number;
  /** What the hosts logged after the submit began, ms from then (where the wake-up's time went). */
  wakeTrace: string[];
  /** Lines at level warn or error the hosts logged from the termination to the end. */
  hostProblems: string[];
  load: { atStart: number[]; atEnd: number[] };
}

const TENANT = "scale-to-zero";
const TOKEN = "scale-to-zero-bridge-token";
const ROLE_PASSWORD = "s2z";

export async function metric(h: HostHandle, name: string): Promise<number | null> {
  const text = await (await fetch(h.metricsUrl)).text();
  const m = new RegExp(`^${name}(?:\\{[^}]*\\})? (\\S+)`, "m").exec(text);
  return m ? Number(m[1]) : null;
}

export async function waitUntil(what: string, timeoutMs: number, check: () => Promise<boolean>): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await sleep(200);
  }
}

export async function runScaleToZero(opts: ScaleToZeroOptions): Promise<ScaleToZeroResult> {
  const say = opts.progress ?? (() => {});
  const fleet = await startSleepFleet({ hosts: opts.hosts, hostEnv: opts.hostEnv });
  const { hosts, observer, earUrl } = fleet;
  try {
    const submitter = new pg.Pool({ connectionString: earUrl, max: 1 });
    submitter.on("error", () => {});
    const db = drizzle(submitter, { schema });
    say(`${opts.hosts} hosts up; one job, then waiting for every host to sleep…`);
    await finished(submitter, await fleet.submit(db, "hello"));
    await submitter.end();
    await waitUntil("every host asleep", 120_000, async () =>
      (await Promise.all(hosts.map((h) => metric(h, "host_fleet_asleep")))).every((v) => v === 1),
    ).catch(async (err: Error) => {
      const idle = await Promise.all(hosts.map((h) => metric(h, "host_fleet_idle")));
      throw new Error(
        `${err.message}; host_fleet_idle ${idle.join(",")}; last host lines:\n${fleet.recent.join("\n")}`,
      );
    });

    fleet.watch();
    const killed = await terminateSessions(observer);
    // Let the terminated backends report their last stats before the first reading.
    await sleep(1500);
    const loadStart = loadAverage();
    const before = await fleet.snapshot();
    say(`window: ${opts.windowMs / 1000} s with ${killed} sessions terminated…`);
    const t0 = performance.now();
    await sleep(opts.windowMs);
    const windowS = (performance.now() - t0) / 1000;
    const after = await fleet.snapshot();
    const loadEnd = loadAverage();
    const statementTexts = statementsBetween(before, after, fleet.roles);
    const redisByCommand = commandsBetween(before, after);

    // The wake-up: a new pool (the observer never touches the hosts' database during the window).
    const late = new pg.Pool({ connectionString: earUrl, max: 1 });
    late.on("error", () => {});
    try {
      const traceFrom = fleet.lines();
      const pokedAt = Date.now();
      const id = await fleet.submit(drizzle(late, { schema }), "wake up");
      const wakeMs = await startedWithin(late, id, 30_000);
      return {
        hosts: opts.hosts,
        windowS,
        terminated: killed,
        statements: sum(statementTexts),
        statementTexts,
        transactions: after.xacts - before.xacts,
        sessions: after.sessions - before.sessions,
        liveSessions: after.live,
        redisCommands: sum(redisByCommand),
        redisByCommand,
        wakeMs,
        wakeTrace: fleet.recent.slice(Math.max(0, fleet.recent.length - (fleet.lines() - traceFrom))).map((l) => {
          const ts = /"ts":"([^"]+)"/.exec(l)?.[1];
          const msg = /"msg":"([^"]+)"/.exec(l)?.[1] ?? l.slice(0, 80);
          return `${l.slice(0, 2)}+${ts ? Date.parse(ts) - pokedAt : "?"} ms ${msg}`;
        }),
        hostProblems: fleet.problems,
        load: { atStart: loadStart, atEnd: loadEnd },
      };
    } finally {
      await late.end().catch(() => {});
    }
  } finally {
    await fleet.stop();
  }
}

/** Ends every other session on the hosts' database (what a compute suspend does); how many. */
export async function terminateSessions(observer: pg.Pool): Promise<number> {
  const { rows } = await observer.query<{ n: string }>(
    `SELECT count(*)::text AS n FROM (
       SELECT pg_terminate_backend(pid) FROM pg_stat_activity
        WHERE datname = 'ear' AND pid <> pg_backend_pid()) t`,
  );
  return Number(rows[0]?.n ?? 0);
}

/** Waits for a job to finish; its enqueue→started in ms (Postgres clock). */
export async function finished(pool: pg.Pool, id: string): Promise<number> {
  let startedMs: number | null = null;
  await waitUntil(`job ${id} to finish`, 60_000, async () => {
    const { rows } = await pool.query<{ ms: number | null; state: string }>(
      "SELECT extract(epoch FROM started_at - created_at) * 1000 AS ms, state FROM jobs WHERE id = $1",
      [id],
    );
    if (rows[0]?.ms !== null && rows[0]?.ms !== undefined) startedMs = Number(rows[0].ms);
    return rows[0]?.state === "completed" || rows[0]?.state === "failed";
  });
  if (startedMs === null) throw new Error(`job ${id} finished without started_at`);
  return startedMs;
}

/** Waits for a job to start; its enqueue→started in ms (Postgres clock). */
export async function startedWithin(pool: pg.Pool, id: string, timeoutMs: number): Promise<number> {
  let ms: number | null = null;
  await waitUntil(`job ${id} to start`, timeoutMs, async () => {
    const { rows } = await pool.query<{ ms: number | null }>(
      "SELECT extract(epoch FROM started_at - created_at) * 1000 AS ms FROM jobs WHERE id = $1",
      [id],
    );
    if (rows[0]?.ms === null || rows[0]?.ms === undefined) return false;
    ms = Number(rows[0].ms);
    return true;
  });
  return ms as unknown as number;
}

/** A fleet of real host processes on a database of their own, with what the two measurements share. */
export interface SleepFleet {
  hosts: HostHandle[];
  /** One Postgres role per host (pg_stat_statements counts per role). */
  roles: string[];
  /** On the `postgres` database: never counted on the hosts' one. */
  observer: pg.Pool;
  earUrl: string;
  /** A client on a bridge of its own, so its commands are told from the hosts'. */
  redisClient: ReturnType<typeof createRedisClient>;
  /** Inserts a job the way the gateway does (the row, then the ready-index command that pokes sleepers). */
  submit(db: ReturnType<typeof drizzle<typeof schema>>, content: string): Promise<string>;
  /** Whether a host's /metrics gauge reads 1. */
  metric(h: HostHandle, name: string): Promise<number | null>;
  /** From now on, host lines at warn or error are problems. */
  watch(): void;
  problems: string[];
  /** Node's own process warnings the hosts printed since they started ("(node:…) DeprecationWarning: …"). */
  nodeWarnings: string[];
  /** The last 60 host lines, `<host number>: <line>`. */
  recent: string[];
  /** Lines logged so far (the wake trace's start). */
  lines(): number;
  snapshot(): Promise<FleetSnapshot>;
  stop(): Promise<void>;
}

export interface FleetSnapshot {
  /** role → statement text → calls. */
  statements: Map<string, Map<string, number>>;
  xacts: number;
  sessions: number;
  live: number;
  commands: Map<string, number>;
}

/** Statements by text (up to 90 characters) made between two snapshots by these roles. */
export function statementsBetween(
  a: FleetSnapshot,
  b: FleetSnapshot,
  roles: readonly string[],
): Record<string, number> {
  const out: Record<string, number> = {};
  for (const role of roles) {
    for (const [q, n] of b.statements.get(role) ?? []) {
      const d = n - (a.statements.get(role)?.get(q) ?? 0);
      const text = q.replace(/\s+/g, " ").slice(0, 90);
      if (d > 0) out[text] = (out[text] ?? 0) + d;
    }
  }
  return out;
}

/** Redis commands by name between two snapshots. */
export function commandsBetween(a: FleetSnapshot, b: FleetSnapshot): Record<string, number> {
  const out: Record<string, number> = {};
  for (const [k, n] of b.commands) {
    const d = n - (a.commands.get(k) ?? 0);
    if (d > 0) out[k] = d;
  }
  return out;
}

export const sum = (r: Record<string, number>): number => Object.values(r).reduce((x, y) => x + y, 0);

export async function startSleepFleet(opts: { hosts: number; hostEnv?: Record<string, string> }): Promise<SleepFleet> {
  const cleanups: Array<() => Promise<unknown>> = [];
  const stop = async () => {
    for (const fn of cleanups.reverse()) await fn().catch(() => {});
  };
  try {
    const pgs = await startPostgres({
      settings: {
        shared_preload_libraries: "pg_stat_statements",
        "pg_stat_statements.track": "all",
        // Autovacuum's workers are the server's own sessions, not a client's, and their
        // transactions land in pg_stat_database (a first 5-minute run counted 24 with it on, and
        // 0 statements from the hosts): off, so the transaction count is the clients' alone.
        autovacuum: "off",
      },
    });
    cleanups.push(() => pgs.stop());
    // The observer: on the `postgres` database, never on the hosts' one.
    const observer = new pg.Pool({ connectionString: pgs.url, max: 1 });
    observer.on("error", () => {});
    cleanups.push(() => observer.end());
    await observer.query("CREATE DATABASE ear");
    // The view reads every database's statements; it is created where the observer reads it.
    await observer.query("CREATE EXTENSION IF NOT EXISTS pg_stat_statements");
    const earUrl = pgs.url.replace(/\/postgres$/, "/ear");
    await applyMigrations(earUrl);
    const roles = Array.from({ length: opts.hosts }, (_, i) => `ear_s2z_${i + 1}`);
    for (const r of roles) await observer.query(`CREATE ROLE ${r} LOGIN SUPERUSER PASSWORD '${ROLE_PASSWORD}'`);
    {
      const setup = new pg.Pool({ connectionString: earUrl, max: 1 });
      await createTenant(drizzle(setup, { schema }), TENANT, "scale to zero");
      await setup.end();
    }

    const redis = await startRedis();
    cleanups.push(() => redis.stop());
    const bridges: UpstashBridge[] = [];
    for (let i = 0; i < 2; i++) {
      const b = await startUpstashBridge({ redisUrl: redis.url, token: TOKEN, log: () => {} });
      bridges.push(b);
      cleanups.push(() => b.close());
    }
    const [hostBridge, ownBridge] = bridges as [UpstashBridge, UpstashBridge];
    const mock = await startMockModel();
    cleanups.push(() => mock.close());
    const ingest = await startAckingIngest();
    cleanups.push(() => ingest.close());

    const problems: string[] = [];
    const nodeWarnings: string[] = [];
    const recent: string[] = [];
    let lines = 0;
    let watching = false;
    const hosts: HostHandle[] = [];
    for (let i = 0; i < opts.hosts; i++) {
      const h = await spawnHost(
        resolve(import.meta.dirname, "../.."),
        {
          HOST_ID: `s2z-host-${i + 1}`,
          DATABASE_URL: `postgres://${roles[i]}:${ROLE_PASSWORD}@127.0.0.1:${pgs.port}/ear`,
          UPSTASH_REDIS_REST_URL: hostBridge.url,
          UPSTASH_REDIS_REST_TOKEN: TOKEN,
          GATEWAY_URL: ingest.url,
          INTERNAL_SIGNING_SECRET: "scale-to-zero-signing-secret-0123456789",
          MODEL_BASE_URL: mock.url,
          MODEL_API_KEY: "mock",
          MODEL_NAME: MOCK_MODEL_NAME,
          HOST_METRICS_PORT: "0",
          // No Docker: the janitor's questions about other deployments' sandboxes are not this fleet's cost.
          SANDBOX_ENABLED: "false",
          ...opts.hostEnv,
        },
        (_source, line) => {
          recent.push(`${i + 1}: ${line.slice(0, 300)}`);
          if (recent.length > 60) recent.shift();
          lines++;
          if (watching && /"level":"(warn|error)"/.test(line)) problems.push(line.slice(0, 300));
          if (/\(node:\d+\) \w*Warning/.test(line)) nodeWarnings.push(`${i + 1}: ${line.slice(0, 300)}`);
        },
        // tsx compiles the host from source at start: slow on a loaded 2-core machine.
        { readyTimeoutMs: 120_000 },
      );
      hosts.push(h);
      cleanups.push(() => h.stop());
    }
    const redisClient = createRedisClient({ url: ownBridge.url, token: TOKEN });
    const snapshot = async (): Promise<FleetSnapshot> => {
      const st = await observer.query<{ role: string; query: string; calls: string }>(
        `SELECT r.rolname AS role, s.query, s.calls::text AS calls FROM pg_stat_statements s JOIN pg_roles r ON r.oid = s.userid
          WHERE r.rolname = ANY($1)`,
        [roles],
      );
      const statements = new Map<string, Map<string, number>>();
      for (const r of st.rows) {
        const byText = statements.get(r.role) ?? new Map<string, number>();
        byText.set(r.query, (byText.get(r.query) ?? 0) + Number(r.calls));
        statements.set(r.role, byText);
      }
      const d = await observer.query<{ xacts: string; sessions: string; live: string }>(
        `SELECT (xact_commit + xact_rollback)::text AS xacts, sessions::text AS sessions,
           (SELECT count(*) FROM pg_stat_activity WHERE datname = 'ear')::text AS live
           FROM pg_stat_database WHERE datname = 'ear'`,
      );
      const info = new RespInfo(redis.url);
      const commands = new Map<string, number>();
      try {
        for (const [k, v] of Object.entries(await info.info("commandstats"))) {
          const name = k.replace(/^cmdstat_/, "");
          if (["info", "client", "command", "hello", "select", "ping"].includes(name.split("|")[0] as string)) continue;
          commands.set(name, Number(/calls=(\d+)/.exec(v)?.[1] ?? 0));
        }
      } finally {
        info.close();
      }
      return {
        statements,
        xacts: Number(d.rows[0]?.xacts ?? 0),
        sessions: Number(d.rows[0]?.sessions ?? 0),
        live: Number(d.rows[0]?.live ?? 0),
        commands,
      };
    };
    return {
      hosts,
      roles,
      observer,
      earUrl,
      redisClient,
      submit: async (db, content) => {
        const id = randomUUID();
        await createJob(db, TENANT, id, { input: { messages: [{ role: "user", content }] } });
        await indexAndWake(redisClient, redisKeys(), [{ score: Date.now(), member: id }]);
        return id;
      },
      metric,
      watch: () => {
        watching = true;
      },
      problems,
      nodeWarnings,
      recent,
      lines: () => lines,
      snapshot,
      stop,
    };
  } catch (err) {
    await stop();
    throw err;
  }
}
