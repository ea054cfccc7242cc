/**
 * `npm run bench:claims [-- --jobs N]`: how fast our fenced claim + started CAS run on local
 * Postgres, against graphile-worker 0.17.3 in the same Postgres (its own schema) as the peer
 * baseline. Figures and their reading live in docs/claims.md.
 *
 *  1. throughput: N jobs pre-inserted; K = 1, 4, 16 claimers (one connection each) loop
 *     claimFromPostgres with batch B = a host's free slots (1, 4, 8 = HOST_MAX_RUNS default, 16), then the started CAS:
 *     one markStarted per claim at B = 1, one markStartedMany for the pass at B > 1 (what the
 *     host's StartBatcher sends). graphile-worker: the same N jobs, concurrency K, a no-op task,
 *     without and with its batching localQueue (size 16); we count task starts/s.
 *  2. latency: an idle claimer (LISTEN ear_ready → claimJob + markStarted, what a host's
 *     ReadyListener does) while jobs are enqueued one by one at 20/s; enqueue→started measured
 *     in this process from before the INSERT to the started CAS returning. graphile-worker:
 *     add_job → task start, same pacing, its own LISTEN wake-up.
 *  3. bloat: n_dead_tup / HOT updates on `jobs` over a whole job lifecycle (claim, start, two
 *     timing facts, heartbeats, terminal write) at fillfactor 100 and 80.
 */
import { randomUUID } from "node:crypto";
import { availableParallelism, loadavg } from "node:os";
import { parseArgs } from "node:util";
import { drizzle } from "drizzle-orm/node-postgres";
import { runMigrations as graphileMigrations, Logger, run as runGraphile } from "graphile-worker";
import pg from "pg";
import {
  claimFromPostgres,
  claimJob,
  type ExecutionIdentity,
  finishJob,
  heartbeat,
  markStarted,
  markStartedMany,
  setTimingFact,
} from "../../src/db/ownership-repo";
import * as schema from "../../src/db/schema";
import { sleep } from "../../src/domain/async";
import { pct } from "../load/stats";
import { applyMigrations } from "../migrate";
import { startPostgres } from "../services/postgres";

const { values } = parseArgs({ args: process.argv.slice(2), options: { jobs: { type: "string" } } });
const N = Number(values.jobs ?? 4000);
const TENANT = "bench";
const silent = new Logger(() => () => {});

const pgs = await startPostgres();
const url = pgs.url;
const admin = new pg.Pool({ connectionString: url, max: 2 });
// Stopping Postgres at the end terminates idle connections; that is not a bench failure.
admin.on("error", () => {});

async function resetJobs(fillfactor = 100): Promise<void> {
  await admin.query("TRUNCATE executions, jobs CASCADE");
  await admin.query(`ALTER TABLE jobs SET (fillfactor = ${fillfactor})`);
  await admin.query(
    `INSERT INTO jobs (id, tenant_id, input, created_at)
     SELECT gen_random_uuid(), $1, '{"messages":[{"role":"user","content":"bench"}]}', now() + i * interval '1 microsecond'
     FROM generate_series(1, $2) i`,
    [TENANT, N],
  );
  await admin.query("VACUUM ANALYZE jobs");
  await admin.query("VACUUM ANALYZE executions");
}

interface TableStats {
  dead: number;
  upd: number;
  hot: number;
  sizeKb: number;
}
async function jobStats(): Promise<TableStats> {
  await sleep(1200); // other backends flush their pending stats at most once a second
  await admin.query("SELECT pg_stat_force_next_flush()");
  const r = await admin.query(
    `SELECT n_dead_tup, n_tup_upd, n_tup_hot_upd, pg_relation_size('jobs') / 1024 AS kb FROM pg_stat_user_tables WHERE relname = 'jobs'`,
  );
  const x = r.rows[0];
  return { dead: Number(x.n_dead_tup), upd: Number(x.n_tup_upd), hot: Number(x.n_tup_hot_upd), sizeKb: Number(x.kb) };
}

/** K claimers, each its own connection, until no job is left. Returns claim+start per second. */
async function ours(k: number, batch: number): Promise<{ perS: number; stats: [TableStats, TableStats] }> {
  await resetJobs();
  const before = await jobStats();
  const pool = new pg.Pool({ connectionString: url, max: k });
  const db = drizzle(pool, { schema });
  await Promise.all(Array.from({ length: k }, () => pool.query("SELECT 1")));
  let started = 0;
  let claimed = 0;
  const t0 = performance.now();
  await Promise.all(
    Array.from({ length: k }, async (_, i) => {
      const host = `bench-${i}`;
      for (;;) {
        const claims = await claimFromPostgres(
          db,
          host,
          Array.from({ length: batch }, () => randomUUID()),
        );
        if (claims.length === 0) return;
        claimed += claims.length;
        if (batch === 1) {
          for (const c of claims) if (await markStarted(db, { ...c, host, executionId: randomUUID() })) started++;
        } else {
          // What a host's StartBatcher does when one claim pass won several jobs.
          const ids = claims.map((c) => ({ ...c, host, executionId: randomUUID() }));
          // (not `started += await …`: that reads `started` before the await and loses updates)
          const n = (await markStartedMany(db, host, ids)).size;
          started += n;
        }
      }
    }),
  );
  const secs = (performance.now() - t0) / 1000;
  await pool.end();
  if (started !== N) {
    const left = await admin.query(
      "SELECT state, owner IS NOT NULL AS claimed, count(*)::int AS n FROM jobs GROUP BY 1, 2",
    );
    throw new Error(
      `K=${k} batch ${batch}: claimed ${claimed}, started ${started} of ${N}; rows now ${JSON.stringify(left.rows)}`,
    );
  }
  return { perS: N / secs, stats: [before, await jobStats()] };
}

async function graphile(k: number, localQueue = 0): Promise<number> {
  await admin.query("DELETE FROM graphile_worker._private_jobs");
  await admin.query(
    "SELECT graphile_worker.add_job('bench', json_build_object('i', i)) FROM generate_series(1, $1) i",
    [N],
  );
  let count = 0;
  let t0 = 0;
  let done: () => void = () => {};
  const finished = new Promise<void>((r) => {
    done = r;
  });
  t0 = performance.now();
  const runner = await runGraphile({
    connectionString: url,
    concurrency: k,
    maxPoolSize: k + 2,
    noHandleSignals: true,
    pollInterval: 1000,
    logger: silent,
    ...(localQueue > 0 ? { preset: { worker: { localQueue: { size: localQueue } } } } : {}),
    taskList: {
      bench: async () => {
        if (++count === N) done();
      },
    },
  });
  await finished;
  const secs = (performance.now() - t0) / 1000;
  await runner.stop();
  return N / secs;
}

/** Idle claimer woken by NOTIFY; jobs enqueued one at a time at 20/s. */
async function oursLatency(m: number): Promise<{ client: number[]; db: number[] }> {
  await admin.query("TRUNCATE executions, jobs CASCADE");
  const pool = new pg.Pool({ connectionString: url, max: 4 });
  const db = drizzle(pool, { schema });
  await pool.query("SELECT 1");
  const sent = new Map<string, number>();
  const lat: number[] = [];
  const listener = new pg.Client({ connectionString: url });
  await listener.connect();
  listener.on("notification", async (msg) => {
    const id = msg.payload as string;
    const token = randomUUID();
    const epoch = await claimJob(db, id, "idle-host", token);
    if (epoch === null) return;
    await markStarted(db, { jobId: id, host: "idle-host", epoch, token, executionId: randomUUID() });
    lat.push(performance.now() - (sent.get(id) as number));
  });
  await listener.query("LISTEN ear_ready");
  const ins = new pg.Client({ connectionString: url });
  await ins.connect();
  for (let i = 0; i < m; i++) {
    const id = randomUUID();
    sent.set(id, performance.now());
    await ins.query(`INSERT INTO jobs (id, tenant_id, input) VALUES ($1, $2, '{"messages":[]}')`, [id, TENANT]);
    await sleep(50);
  }
  while (lat.length < m) await sleep(20);
  const r = await admin.query(
    "SELECT extract(epoch FROM started_at - created_at) * 1000 AS ms FROM jobs WHERE started_at IS NOT NULL",
  );
  await Promise.all([listener.end(), ins.end(), pool.end()]);
  return { client: lat, db: r.rows.map((x) => Number(x.ms)) };
}

async function graphileLatency(m: number): Promise<number[]> {
  await admin.query("DELETE FROM graphile_worker._private_jobs");
  const lat: number[] = [];
  const runner = await runGraphile({
    connectionString: url,
    concurrency: 4,
    noHandleSignals: true,
    pollInterval: 2000,
    logger: silent,
    taskList: {
      lat: async (payload) => {
        lat.push(performance.timeOrigin + performance.now() - (payload as { t0: number }).t0);
      },
    },
  });
  await sleep(500);
  const ins = new pg.Client({ connectionString: url });
  await ins.connect();
  for (let i = 0; i < m; i++) {
    await ins.query("SELECT graphile_worker.add_job('lat', json_build_object('t0', $1::float8))", [
      performance.timeOrigin + performance.now(),
    ]);
    await sleep(50);
  }
  while (lat.length < m) await sleep(20);
  await ins.end();
  await runner.stop();
  return lat;
}

/** One full lifecycle per job through the repository functions; HOT share and dead tuples. */
async function lifecycle(fillfactor: number): Promise<[TableStats, TableStats]> {
  await resetJobs(fillfactor);
  const before = await jobStats();
  const pool = new pg.Pool({ connectionString: url, max: 4 });
  const db = drizzle(pool, { schema });
  await Promise.all(
    Array.from({ length: 4 }, async (_, i) => {
      const host = `life-${i}`;
      for (;;) {
        const claims = await claimFromPostgres(db, host, [randomUUID(), randomUUID(), randomUUID(), randomUUID()]);
        if (claims.length === 0) return;
        const ids: ExecutionIdentity[] = [];
        for (const c of claims) {
          const id = { ...c, host, executionId: randomUUID() };
          if (await markStarted(db, id)) ids.push(id);
        }
        for (const id of ids) await setTimingFact(db, id, "prepared_at");
        for (const id of ids) await setTimingFact(db, id, "first_output_at");
        await heartbeat(db, host, ids);
        await heartbeat(db, host, ids);
        for (const id of ids) await finishJob(db, id, { state: "completed", output: "ok" });
      }
    }),
  );
  await pool.end();
  return [before, await jobStats()];
}

try {
  await applyMigrations(url);
  await admin.query("INSERT INTO tenants (id, name) VALUES ($1, 'bench')", [TENANT]);
  await graphileMigrations({ connectionString: url, logger: silent });
  console.log(
    `bench:claims — ${N} jobs per run, Postgres 18 (embedded, fsync=off), ${availableParallelism()} cores, load average ${loadavg()[0]?.toFixed(1)}\n`,
  );

  console.log("claim+start per second (pre-inserted backlog)");
  console.log(
    "  claimers | ours b1 | ours b4 | ours b8 | ours b16 | graphile | graphile localQueue | b1/graphile | b8/graphile | b16/graphile-lq",
  );
  const rows: Array<{ k: number; dead: [TableStats, TableStats] }> = [];
  for (const k of [1, 4, 16]) {
    const b1 = await ours(k, 1);
    const b4 = await ours(k, 4);
    const b8 = await ours(k, 8);
    const b16 = await ours(k, 16);
    const gw = await graphile(k);
    const gwq = await graphile(k, 16);
    rows.push({ k, dead: b1.stats });
    const c = (x: number, w: number) => x.toFixed(0).padStart(w);
    console.log(
      `  ${String(k).padStart(8)} | ${c(b1.perS, 7)} | ${c(b4.perS, 7)} | ${c(b8.perS, 7)} | ${c(b16.perS, 8)} | ${c(gw, 8)} | ${c(gwq, 19)} | ${(b1.perS / gw).toFixed(2).padStart(10)}× | ${(b8.perS / gw).toFixed(2).padStart(10)}× | ${(b16.perS / gwq).toFixed(2).padStart(14)}×`,
    );
  }
  const d = rows[rows.length - 1]?.dead;
  if (d) {
    console.log(
      `  jobs n_dead_tup before/after the K=16 batch-1 run: ${d[0].dead} → ${d[1].dead} (${d[1].upd - d[0].upd} updates, ${d[1].hot - d[0].hot} HOT)`,
    );
  }

  console.log("\nenqueue → started, idle claimer, 20 jobs/s, 300 jobs");
  const o = await oursLatency(300);
  const g = await graphileLatency(300);
  const f = (xs: number[]) =>
    `p50 ${pct(xs, 50).toFixed(1)} ms, p95 ${pct(xs, 95).toFixed(1)} ms, max ${pct(xs, 100).toFixed(1)} ms`;
  console.log(`  ours (NOTIFY → claim → start):   ${f(o.client)}`);
  console.log(`  ours, Postgres clock (created→started): ${f(o.db)}`);
  console.log(`  graphile-worker (add_job → task): ${f(g)}`);
  console.log(`  p95 ratio graphile/ours: ${(pct(g, 95) / pct(o.client, 95)).toFixed(2)}×`);

  console.log("\nbloat over a full lifecycle (claim, start, 2 timing facts, 2 heartbeats, finish) per job");
  for (const ff of [100, 80]) {
    const [b, a] = await lifecycle(ff);
    const upd = a.upd - b.upd;
    const hot = a.hot - b.hot;
    console.log(
      `  fillfactor ${ff}: ${upd} updates, ${hot} HOT (${((100 * hot) / upd).toFixed(0)}%), n_dead_tup ${b.dead} → ${a.dead}, heap ${b.sizeKb} → ${a.sizeKb} kB`,
    );
  }
} finally {
  await admin.end();
  process.on("uncaughtException", (err) => {
    if (!String(err).includes("terminating connection due to administrator command")) throw err;
  });
  await pgs.stop();
}
