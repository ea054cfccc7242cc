/**
 * `npm run bench:claims [-- --jobs N --reps R --claimers 1,4,16 --investigate --json]`: the whole
 * lifecycle of a job on our fenced claims against two Postgres queues Node users pick, in the
 * same Postgres, each configuration R (default 3) times in this one process, interleaved, and
 * printed as median (min–max) with the load average. Figures and their reading: docs/claims.md.
 *
 *  1. throughput, N jobs pre-inserted, K = 1, 4, 16 claimers/workers, one full lifecycle per job:
 *     - ours: what a host does now, per claim pass of B = its free slots (1, 8 = the HOST_MAX_RUNS
 *       default, 16): claim (one statement), started CAS (one statement, StartBatcher), the
 *       terminal writes (one statement, FinishBatcher) carrying `prepared_at` and
 *       `first_output_at`; and the host's heartbeat loop, one statement for the runs it holds
 *       every HOST_HEARTBEAT_MS, carrying the facts of the runs it finds (a no-op run is
 *       usually over before one comes). "hb every pass" heartbeats every pass instead: the cost
 *       for runs long enough to be heartbeaten. No-op agent. The lifecycle statements go out as
 *       named prepared statements, as from a host on a direct connection; "b16 unprepared"
 *       sends them unnamed (a host behind a pooler; the pre-change host always did).
 *     - ours b8 / b16 before: the same lifecycle on the jobs table as it was before migration 0024
 *       (fillfactor 100, jobs_tenant_queued_idx, jobs_running_owner_idx), set up for its run and
 *       undone after.
 *     - ours pre-change (B = 8): what a host did before the terminal write was group-committed
 *       and the timing facts folded: the same claim and start statements, then per job one
 *       `UPDATE … SET prepared_at`, one `… first_output_at`, one terminal write; the same
 *       heartbeat loop.
 *     - graphile-worker 0.17.3: concurrency K, a no-op task (fetch, run, complete), without and
 *       with its batching localQueue (size 16).
 *     - pg-boss 10.4.2: K loops of fetch(batchSize B) → no-op → complete(ids), the same shape
 *       as our claimer loop.
 *     Every side is timed from its first job start to its last completion, with its connections
 *     already open, so a runner's start-up is not counted against it.
 *  2. latency: an idle claimer (LISTEN ear_ready → claim + started CAS, what a host's
 *     ReadyListener does) while jobs are enqueued one by one at 20/s; graphile-worker's add_job →
 *     task start with its own LISTEN wake-up. (pg-boss has no wake-up: it polls, ≥ 0.5 s.)
 *  3. WAL by record type (pg_walinspect) of one lifecycle run, now and before; bloat: n_dead_tup /
 *     HOT updates on `jobs` over the whole lifecycle, now and pre-change.
 *  4. with --investigate: why graphile-worker once looked slower at 4 workers than at 1.
 *  --admission instead runs only the admission claim's cost against the first-come claim, with
 *  1 and 1,000 tenants holding queued work (`admissionCost` below), with and without a newcomer
 *  reserve of 1 slot.
 */
import { randomUUID } from "node:crypto";
import { availableParallelism } from "node:os";
import { sql } from "drizzle-orm";
import { drizzle } from "drizzle-orm/node-postgres";
import { runMigrations as graphileMigrations, Logger, run as runGraphile } from "graphile-worker";
import pg from "pg";
import PgBoss from "pg-boss";
import { nameLifecycleStatements } from "../../sandbox-host/prepared-statements";
import { type Db, resultRows } from "../../src/db/client";
import {
  claimable,
  claimFromPostgres,
  type ExecutionIdentity,
  finishJobsMany,
  heartbeat,
  markStartedMany,
  runnable,
} from "../../src/db/ownership-repo";
import * as schema from "../../src/db/schema";
import { held } from "../../src/db/schema";
import { sleep } from "../../src/domain/async";
import { DEFAULT_HEARTBEAT_MS } from "../../src/domain/recovery";
import { claimJob, finishJob, markStarted } from "../lib/single-row-writes";
import { applyMigrations } from "../stack/migrate";
import { startPostgres } from "../stack/services/postgres";
import { dist, loadAverage, pct, startBench, summary } from "./harness";

const bench = startBench({
  usage:
    "npm run bench:claims -- [--jobs 4000] [--reps 3] [--claimers 1,4,16] [--only NAME,…] [--investigate] [--admission [--samples 200]] [--json]",
  options: {
    jobs: { type: "string" },
    reps: { type: "string" },
    claimers: { type: "string" },
    investigate: { type: "boolean" },
    only: { type: "string" },
    admission: { type: "boolean" },
    samples: { type: "string" },
  },
});
const values = bench.args;
const N = Number(values.jobs ?? 4000);
const REPS = Number(values.reps ?? 3);
const KS = (values.claimers ?? "1,4,16").split(",").map(Number);
const TENANT = "bench";
const silent = new Logger(() => () => {});
const load = () => (loadAverage()[0] ?? Number.NaN).toFixed(1);

const pgs = await startPostgres();
const url = pgs.url;
const admin = new pg.Pool({ connectionString: url, max: 2 });
// Stopping Postgres at the end terminates idle connections; that is not a bench failure.
admin.on("error", () => {});

async function resetJobs(): Promise<void> {
  await admin.query("TRUNCATE executions, jobs CASCADE");
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

/**
 * The timing-fact write a host made per fact before the facts were folded into the heartbeat and
 * the terminal write (it was `setTimingFact`): kept here only as the pre-change baseline.
 */
async function preChangeTimingFact(db: Db, id: ExecutionIdentity, column: "prepared_at" | "first_output_at") {
  await db.execute(sql`
    UPDATE jobs SET ${sql.identifier(column)} = now()
    WHERE id = ${id.jobId} AND owner = ${id.host} AND epoch = ${id.epoch} AND token = ${id.token}
      AND execution_id = ${id.executionId} AND state = 'running' AND ${sql.identifier(column)} IS NULL`);
}

/** WAL written by the timed section of the last run (set by each side's run function). */
let walBytes = 0;
const walLsn = async () => (await admin.query("SELECT pg_current_wal_lsn() AS l")).rows[0].l as string;
const walSince = async (from: string) =>
  Number((await admin.query("SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), $1) AS d", [from])).rows[0].d);

/**
 * The jobs table as it was before migration 0024 (fillfactor 100, jobs_tenant_queued_idx and
 * jobs_running_owner_idx, which took an entry from every claim and every start), for the "before" columns: the same lifecycle on the same
 * Postgres in the same run. The table's own settings and indexes are put back after.
 */
async function withTableBefore<T>(run: () => Promise<T>): Promise<T> {
  const { rows } = await admin.query("SELECT reloptions FROM pg_class WHERE oid = 'jobs'::regclass");
  const opts = (rows[0]?.reloptions ?? []) as string[];
  await admin.query("ALTER TABLE jobs SET (fillfactor = 100)");
  await admin.query("CREATE INDEX jobs_tenant_queued_idx ON jobs (tenant_id) WHERE state = 'queued'");
  await admin.query("CREATE INDEX jobs_running_owner_idx ON jobs (owner) WHERE state = 'running'");
  try {
    return await run();
  } finally {
    await admin.query("DROP INDEX jobs_tenant_queued_idx, jobs_running_owner_idx");
    await admin.query(
      opts.length > 0 ? `ALTER TABLE jobs SET (${opts.join(", ")})` : "ALTER TABLE jobs RESET (fillfactor)",
    );
  }
}

/** LSNs of the last run's timed section, for the WAL breakdown by record type. */
let walRange: [string, string] = ["0/0", "0/0"];

/** WAL of the last run by record type (pg_walinspect), bytes per job, largest first. */
async function walByRecord(): Promise<Array<{ type: string; perJob: number; bytesPerJob: number }>> {
  await admin.query("CREATE EXTENSION IF NOT EXISTS pg_walinspect");
  const r = await admin.query(
    `SELECT "resource_manager/record_type" AS t, count, combined_size FROM pg_get_wal_stats($1, $2, true)
     WHERE count > 0 ORDER BY combined_size DESC`,
    walRange,
  );
  return r.rows.map((x) => ({ type: x.t, perJob: Number(x.count) / N, bytesPerJob: Number(x.combined_size) / N }));
}

type Mode = "now" | "pre-change" | "unprepared";
/** How often a host heartbeats its runs (HOST_HEARTBEAT_MS); `perPass` heartbeats every pass. */
type Heartbeats = "timer" | "perPass";
let heartbeatStatements = 0;

/** K claimers, each its own connection, whole lifecycles until no job is left. Jobs per second. */
async function ours(
  k: number,
  batch: number,
  mode: Mode,
  hb: Heartbeats = "timer",
  fresh = false,
  claimWith: "admission" | "replanned" | "first-come" = "admission",
): Promise<number> {
  if (!fresh) await resetJobs();
  const pool = new pg.Pool({ connectionString: url, max: k });
  // As a host on a direct connection does now; the pre-change host sent every statement unnamed.
  if (mode === "now") nameLifecycleStatements(pool);
  const db = drizzle(pool, { schema });
  await Promise.all(Array.from({ length: k }, () => pool.query("SELECT 1")));
  let finished = 0;
  const w0 = await walLsn();
  const t0 = performance.now();
  await Promise.all(
    Array.from({ length: k }, async (_, i) => {
      const host = `bench-${i}`;
      let lastHeartbeat = performance.now();
      // The host's heartbeat loop: one statement for the runs it holds, every HOST_HEARTBEAT_MS
      // (a no-op run is usually over before one comes), or every pass with `perPass`.
      const heartbeatDue = () => hb === "perPass" || performance.now() - lastHeartbeat >= DEFAULT_HEARTBEAT_MS;
      for (;;) {
        const tokens = Array.from({ length: batch }, () => randomUUID());
        const claims =
          claimWith === "admission"
            ? await claimFromPostgres(db, host, tokens)
            : claimWith === "replanned"
              ? await replannedAdmissionClaim(db as unknown as Db, host, tokens)
              : resultRows<{ id: string; epoch: number; token: string }>(
                  await preAdmissionClaim(db as unknown as Db, host, tokens),
                ).map((r) => ({ jobId: r.id, token: r.token, epoch: Number(r.epoch) }));
        if (claims.length === 0) return;
        const ids = claims.map((c) => ({ ...c, host, executionId: randomUUID() }));
        // One start statement per pass, as StartBatcher sends it (B = 1: a lone start).
        const started = await markStartedMany(db, ids);
        const runs = ids.filter((id) => started.has(id.executionId));
        // The no-op agent: prepared, first output, done.
        const preparedAt = performance.now();
        const firstOutputAt = performance.now();
        if (mode !== "pre-change") {
          // The facts ride on the heartbeat if one comes, else on the terminal write.
          let facts: { prepared_at?: number; first_output_at?: number } = {
            prepared_at: preparedAt,
            first_output_at: firstOutputAt,
          };
          if (heartbeatDue()) {
            await heartbeat(
              db,
              runs.map((id) => ({ ...id, facts })),
            );
            heartbeatStatements++;
            lastHeartbeat = performance.now();
            facts = {};
          }
          const done = await finishJobsMany(
            db,
            runs.map((id) => ({ id, outcome: { state: "completed", output: "ok" }, facts })),
          );
          finished += done.filter((d) => d.written).length;
        } else {
          for (const id of runs) await preChangeTimingFact(db, id, "prepared_at");
          for (const id of runs) await preChangeTimingFact(db, id, "first_output_at");
          if (heartbeatDue()) {
            await heartbeat(db, runs);
            heartbeatStatements++;
            lastHeartbeat = performance.now();
          }
          for (const id of runs) if (await finishJob(db, id, { state: "completed", output: "ok" })) finished++;
        }
      }
    }),
  );
  const secs = (performance.now() - t0) / 1000;
  walBytes = await walSince(w0);
  walRange = [w0, await walLsn()];
  await pool.end();
  if (finished !== N) {
    const left = await admin.query("SELECT state, count(*)::int AS n FROM jobs GROUP BY 1");
    throw new Error(`K=${k} B=${batch} ${mode}: finished ${finished} of ${N}; rows now ${JSON.stringify(left.rows)}`);
  }
  return N / secs;
}

interface GraphileOpts {
  localQueue?: number;
  maxPoolSize?: number;
  /** Skip the VACUUM of graphile's job table after the previous run (investigation only). */
  noVacuum?: boolean;
  /** Time from before `run()` (start-up included), as the first version of this bench did. */
  fromRunnerStart?: boolean;
}

/** graphile-worker, concurrency K, no-op task. Jobs per second from the first task to the last. */
async function graphile(k: number, o: GraphileOpts = {}): Promise<number> {
  await admin.query("DELETE FROM graphile_worker._private_jobs");
  // Every side starts from a vacuumed table: our runs TRUNCATE; this DELETE leaves the last
  // run's rows dead until a VACUUM, and the job fetch would walk past them.
  if (!o.noVacuum) await admin.query("VACUUM ANALYZE graphile_worker._private_jobs");
  await admin.query(
    "SELECT graphile_worker.add_job('bench', json_build_object('i', i)) FROM generate_series(1, $1) i",
    [N],
  );
  if (!o.noVacuum) await admin.query("ANALYZE graphile_worker._private_jobs");
  let count = 0;
  let first = 0;
  let last = 0;
  let done: () => void = () => {};
  const finished = new Promise<void>((r) => {
    done = r;
  });
  const w0 = await walLsn();
  const t0 = performance.now();
  const runner = await runGraphile({
    connectionString: url,
    concurrency: k,
    maxPoolSize: o.maxPoolSize ?? k + 2,
    noHandleSignals: true,
    pollInterval: 1000,
    logger: silent,
    ...(o.localQueue ? { preset: { worker: { localQueue: { size: o.localQueue } } } } : {}),
    taskList: {
      bench: async () => {
        if (count++ === 0) first = performance.now();
      },
    },
  });
  // A task counts once its completion is written: graphile's job_complete empties the table.
  runner.events.on("job:complete", () => {
    last = performance.now();
    if (last > 0 && count === N) done();
  });
  await finished;
  // Wait for the completions still in flight (batched or not) to reach the table.
  for (;;) {
    const r = await admin.query("SELECT count(*)::int AS n FROM graphile_worker._private_jobs");
    if (r.rows[0].n === 0) break;
    await sleep(5);
  }
  last = performance.now();
  walBytes = await walSince(w0);
  await runner.stop();
  return o.fromRunnerStart ? N / ((last - t0) / 1000) : (N - 1) / ((last - first) / 1000);
}

let bossQueue = 0;
/** pg-boss: K loops of fetch(B) → no-op → complete(ids). Jobs per second. */
async function pgBoss(boss: PgBoss, k: number, batch: number): Promise<number> {
  const name = `bench-${++bossQueue}`;
  await boss.createQueue(name);
  for (let i = 0; i < N; i += 1000) {
    await boss.insert(Array.from({ length: Math.min(1000, N - i) }, (_, j) => ({ name, data: { i: i + j } })));
  }
  await admin.query("ANALYZE pgboss.job");
  let completed = 0;
  const w0 = await walLsn();
  const t0 = performance.now();
  await Promise.all(
    Array.from({ length: k }, async () => {
      for (;;) {
        const jobs = await boss.fetch(name, { batchSize: batch });
        if (jobs.length === 0) return;
        await boss.complete(
          name,
          jobs.map((j) => j.id),
        );
        completed += jobs.length;
      }
    }),
  );
  const secs = (performance.now() - t0) / 1000;
  walBytes = await walSince(w0);
  const left = await boss.getQueueSize(name, { before: "completed" });
  if (completed !== N || left !== 0) throw new Error(`pg-boss K=${k} B=${batch}: completed ${completed}, ${left} left`);
  // Not deleteQueue: pg-boss 10.4.2's delete_queue trips its own foreign key on Postgres 18.
  // Each run has its own queue (its own partition); empty it so later runs' ANALYZE stays cheap.
  const part = await admin.query("SELECT partition_name FROM pgboss.queue WHERE name = $1", [name]);
  await admin.query(`TRUNCATE pgboss.${pg.escapeIdentifier(part.rows[0].partition_name)}`);
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

/** Row versions, HOT share and dead tuples over N whole lifecycles (4 claimers, B = 8). */
async function bloat(mode: Mode): Promise<[TableStats, TableStats]> {
  await resetJobs();
  const before = await jobStats();
  await ours(4, 8, mode, "timer", true);
  return [before, await jobStats()];
}

const fmt = (xs: number[]) => {
  const s = [...xs].sort((a, b) => a - b);
  return `${pct(s, 50).toFixed(0)} (${s[0]?.toFixed(0)}–${s[s.length - 1]?.toFixed(0)})`;
};
const median = (xs: number[]) => pct(xs, 50);

// --admission: the admission claim's cost against the first-come claim it replaced (docs/claims.md
// "Admission"). Scenarios: 4,000 queued jobs held by 1 tenant or by 1,000 tenants (4 each), with
// 64 running (spread over the first 64 tenants), so the statement has held counts to weigh. Each
// sample is one claim of B = 8 inside BEGIN … ROLLBACK on one connection, so every sample sees the
// same table; timed at the client, both sent as named prepared statements as a host on a direct
// connection sends them; plus the server's plan + execute time of an unprepared one.

/**
 * The admission claim as it was before its batch size became part of its text (docs/claims.md,
 * "Cost of the claim statement"): the same statement with its LIMITs as parameters, under the
 * name it had, so Postgres re-planned it on every execution. Kept here only as the baseline.
 */
async function replannedAdmissionClaim(db: Db, host: string, tokens: string[], olderThanMs = 0) {
  const want = tokens.length;
  // What makes a job of tenant t.id takeable now (both probes below repeat it). The probes order
  // as jobs_admission_idx does (priority is never null: NULLS LAST only lets the index serve).
  const admissible = sql`j.tenant_id = t.id AND ${claimable("j")} AND ${runnable("j")}
    AND j.created_at <= now() - make_interval(secs => ${olderThanMs / 1000})
    AND (j.concurrency_key IS NULL OR NOT EXISTS (SELECT 1 FROM jobs o
      WHERE o.tenant_id = j.tenant_id AND o.concurrency_key = j.concurrency_key AND ${held("o")}))`;
  const rows = resultRows<{ id: string; epoch: number; token: string }>(
    await db.execute(sql`/* ear_claim_poll */ 
      WITH held AS (
        SELECT tenant_id, count(*)::int AS n,
          coalesce(array_agg(tenant_slot) FILTER (WHERE tenant_slot IS NOT NULL), '{}') AS slots
        FROM jobs WHERE ${held()} GROUP BY tenant_id
      ), served AS (
        -- The first B tenants with takeable work, in the order of their next job's rank: only
        -- they can fill B slots (any other tenant's first job ranks after theirs). Walked in
        -- order and stopped at B, so tenants further down are never probed.
        SELECT o.* FROM (
          SELECT t.id, t.weight, t.max_running, coalesce(h.n, 0) AS held, coalesce(h.slots, '{}') AS slots,
            (coalesce(h.n, 0) + 1)::float8 / t.weight AS first_turn, random() AS tie
          FROM tenants t LEFT JOIN held h ON h.tenant_id = t.id
          WHERE t.max_running = 0 OR coalesce(h.n, 0) < t.max_running
          ORDER BY first_turn, tie
        ) o
        CROSS JOIN LATERAL (SELECT 1 FROM jobs j, (SELECT o.id) AS t(id) WHERE ${admissible}
          ORDER BY j.priority DESC NULLS LAST, j.created_at LIMIT 1) w
        ORDER BY o.first_turn, o.tie
        LIMIT ${want}
      ), cand AS (
        -- Each served tenant's first B takeable jobs, locked as they are read and skipping what
        -- a concurrent claim holds (as the first-come claim did): racing claimers take
        -- different jobs instead of all picking the same ones.
        SELECT s.id AS tenant_id, s.weight, s.max_running, s.held, s.slots, s.tie,
          c.id, c.created_at, c.priority, c.concurrency_key
        FROM served s
        CROSS JOIN LATERAL (
          SELECT j.id, j.created_at, j.priority, j.concurrency_key FROM jobs j, (SELECT s.id) AS t(id)
          WHERE ${admissible}
          ORDER BY j.priority DESC NULLS LAST, j.created_at
          LIMIT ${want}
          FOR UPDATE OF j SKIP LOCKED
        ) c
      ), heads AS (
        SELECT *, row_number() OVER (PARTITION BY tenant_id, concurrency_key ORDER BY priority DESC, created_at) AS in_key
        FROM cand
      ), ranked AS (
        SELECT *, row_number() OVER (PARTITION BY tenant_id ORDER BY priority DESC, created_at) AS k
        FROM heads WHERE concurrency_key IS NULL OR in_key = 1
      ), picked AS (
        SELECT id, (held + k)::float8 / weight AS turn, created_at,
          CASE WHEN max_running > 0 THEN (SELECT s FROM generate_series(1, max_running) s
            WHERE NOT (s = ANY (slots)) ORDER BY s OFFSET k - 1 LIMIT 1) END AS slot
        FROM ranked
        WHERE max_running = 0 OR held + k <= max_running
        ORDER BY turn, created_at LIMIT ${want}
      ), numbered AS (
        SELECT id, slot, row_number() OVER (ORDER BY turn, created_at) AS n FROM picked
      ), toks AS (
        SELECT t, n FROM unnest(string_to_array(${tokens.join(",")}, ',')::uuid[]) WITH ORDINALITY AS u(t, n)
      )
      UPDATE jobs j SET owner = ${host}, claimed_at = now(), epoch = j.epoch + 1, token = toks.t,
        tenant_slot = numbered.slot
      FROM numbered JOIN toks USING (n)
      WHERE j.id = numbered.id AND ${claimable("j")}
      RETURNING j.id, j.epoch, j.token`),
  );
  return rows.map((r) => ({ jobId: r.id, epoch: Number(r.epoch), token: r.token }));
}

/**
 * The claim statement before admission (first-come across all tenants, by created_at): kept
 * here only as the baseline, like preChangeTimingFact in claims.ts.
 */
function preAdmissionClaim(db: Db, host: string, tokens: string[]) {
  // Named like a lifecycle statement, so it goes out prepared as the admission claim does.
  return db.execute(sql`/* ear_claim_first_come */
    WITH candidates AS (
      SELECT id, row_number() OVER (ORDER BY created_at) AS n FROM (
        SELECT id, created_at FROM jobs
        WHERE state = 'queued' AND owner IS NULL AND claimed_at IS NULL AND execution_id IS NULL AND execution_started_at IS NULL
        ORDER BY created_at LIMIT ${tokens.length}
        FOR UPDATE SKIP LOCKED
      ) c
    ), toks AS (
      SELECT t, n FROM unnest(string_to_array(${tokens.join(",")}, ',')::uuid[]) WITH ORDINALITY AS u(t, n)
    )
    UPDATE jobs j SET owner = ${host}, claimed_at = now(), epoch = j.epoch + 1, token = toks.t
    FROM candidates JOIN toks USING (n)
    WHERE j.id = candidates.id AND j.state = 'queued' AND j.owner IS NULL AND j.claimed_at IS NULL
      AND j.execution_id IS NULL AND j.execution_started_at IS NULL
    RETURNING j.id, j.epoch, j.token`);
}

async function setUp(admin: pg.Pool, tenants: number, jobs: number, running: number): Promise<void> {
  await admin.query("TRUNCATE executions, jobs CASCADE");
  await admin.query("DELETE FROM tenants WHERE id LIKE 'adm-%'");
  await admin.query(`INSERT INTO tenants (id, name) SELECT 'adm-' || i, 'bench' FROM generate_series(1, $1) i`, [
    tenants,
  ]);
  // Jobs interleaved across tenants in submit order (job i belongs to tenant i mod T).
  await admin.query(
    `INSERT INTO jobs (id, tenant_id, input, created_at)
     SELECT gen_random_uuid(), 'adm-' || (1 + i % $1), '{"messages":[{"role":"user","content":"bench"}]}',
       now() - interval '1 hour' + i * interval '1 millisecond'
     FROM generate_series(0, $2 - 1) i`,
    [tenants, jobs],
  );
  await admin.query(
    `INSERT INTO jobs (id, tenant_id, input, state, owner, claimed_at, epoch, token, execution_id,
       execution_started_at, started_at, heartbeat_at)
     SELECT gen_random_uuid(), 'adm-' || (1 + i % $1), '{"messages":[{"role":"user","content":"bench"}]}', 'running',
       'busy-host', now(), 1, gen_random_uuid(), gen_random_uuid(), now(), now(), now()
     FROM generate_series(0, $2 - 1) i`,
    [Math.min(tenants, running), running],
  );
  await admin.query("VACUUM ANALYZE jobs");
  await admin.query("VACUUM ANALYZE tenants");
}

type Claim = (db: Db, tokens: string[]) => Promise<unknown>;

async function sample(client: pg.PoolClient, db: Db, claim: Claim, batch: number): Promise<number> {
  await client.query("BEGIN");
  const t0 = performance.now();
  await claim(
    db,
    Array.from({ length: batch }, () => randomUUID()),
  );
  const ms = performance.now() - t0;
  await client.query("ROLLBACK");
  return ms;
}

/** The server's execution time of one claim (EXPLAIN ANALYZE of the statement, rolled back). */
async function serverMs(client: pg.PoolClient, text: string, values: unknown[]): Promise<number> {
  await client.query("BEGIN");
  const r = await client.query(`EXPLAIN (ANALYZE, FORMAT JSON) ${text}`, values);
  await client.query("ROLLBACK");
  const plan = (r.rows[0] as { "QUERY PLAN": Array<{ "Execution Time": number; "Planning Time": number }> })[
    "QUERY PLAN"
  ][0];
  return (plan?.["Execution Time"] ?? Number.NaN) + (plan?.["Planning Time"] ?? Number.NaN);
}

interface AdmissionCostResult {
  scenario: string;
  side: string;
  p50: number;
  p95: number;
  serverP50: number;
  claimed: number;
}

/** Runs every scenario; `say` prints a line. Returns the figures for --json. */
async function admissionCost(
  admin: pg.Pool,
  url: string,
  opts: { samples: number; batch: number; say: (line: string) => void; load: () => string },
): Promise<AdmissionCostResult[]> {
  const named = new pg.Pool({ connectionString: url, max: 1 });
  named.on("error", () => {});
  nameLifecycleStatements(named);
  const client = await named.connect();
  const captured: Array<{ text: string; values: unknown[] }> = [];
  const db = drizzle(client, { schema }) as unknown as Db;
  // A second handle that records the statement instead of sending it, for EXPLAIN.
  const recorder = drizzle(
    {
      query: (q: { text: string; values?: unknown[] } | string, values?: unknown[]) => {
        if (typeof q === "string") captured.push({ text: q, values: values ?? [] });
        else captured.push({ text: q.text, values: q.values ?? values ?? [] });
        return Promise.resolve({ rows: [], rowCount: 0, command: "UPDATE", fields: [] });
      },
    } as unknown as pg.PoolClient,
    { schema },
  ) as unknown as Db;
  const sides: Array<{ side: string; claim: Claim }> = [
    { side: "admission (now)", claim: (d, tokens) => claimFromPostgres(d, "bench-host", tokens) },
    // The same claim keeping 1 of its B slots for newcomers (HOST_RESERVED_SLOTS=1, the default on
    // a host of 8): what the reserve's extra window and walk order cost.
    {
      side: "admission, 1 reserved",
      claim: (d, tokens) => claimFromPostgres(d, "bench-host", tokens, 0, 1),
    },
    { side: "replanned (before)", claim: (d, tokens) => replannedAdmissionClaim(d, "bench-host", tokens) },
    { side: "first-come (before)", claim: (d, tokens) => preAdmissionClaim(d, "bench-host", tokens) },
  ];
  const out: AdmissionCostResult[] = [];
  try {
    for (const tenants of [1, 1000]) {
      await setUp(admin, tenants, 4000, 64);
      const times = new Map<string, number[]>(sides.map((s) => [s.side, []]));
      for (let i = 0; i < opts.samples; i++) {
        for (const s of i % 2 === 0 ? sides : [...sides].reverse()) {
          times.get(s.side)?.push(await sample(client, db, s.claim, opts.batch));
        }
      }
      opts.say(`  ${tenants} tenant(s) with 4,000 queued jobs, 64 running, B = ${opts.batch} (load ${opts.load()}):`);
      for (const s of sides) {
        captured.length = 0;
        await s.claim(
          recorder,
          Array.from({ length: opts.batch }, () => randomUUID()),
        );
        const stmt = captured[0];
        const server: number[] = [];
        for (let i = 0; i < 20 && stmt; i++) server.push(await serverMs(client, stmt.text, stmt.values));
        await client.query("BEGIN");
        const claimed = await s.claim(
          db,
          Array.from({ length: opts.batch }, () => randomUUID()),
        );
        await client.query("ROLLBACK");
        const n = Array.isArray(claimed) ? claimed.length : ((claimed as { rowCount?: number }).rowCount ?? Number.NaN);
        const xs = times.get(s.side) ?? [];
        const r = {
          scenario: `${tenants} tenants`,
          side: s.side,
          p50: pct(xs, 50),
          p95: pct(xs, 95),
          serverP50: pct(server, 50),
          claimed: n,
        };
        out.push(r);
        opts.say(
          `    ${s.side.padEnd(22)} prepared, at the client: p50 ${r.p50.toFixed(2)} ms, p95 ${r.p95.toFixed(2)} ms · unprepared, server plan + execute p50 ${r.serverP50.toFixed(2)} ms · ${n} claimed per statement`,
        );
      }
    }
  } finally {
    client.release();
    await named.end();
  }
  return out;
}

try {
  await applyMigrations(url);
  if (values.admission) {
    bench.say(
      `bench:claims --admission — the claim statement now against the first-come one it replaced, ${availableParallelism()} cores, load average ${load()} at start`,
    );
    const figures = await admissionCost(admin, url, {
      samples: Number(values.samples ?? 200),
      batch: 8,
      say: (line) => bench.say(line),
      load,
    });
    bench.done({ admission: figures });
  } else {
    await admin.query("INSERT INTO tenants (id, name) VALUES ($1, 'bench')", [TENANT]);
    await graphileMigrations({ connectionString: url, logger: silent });
    const boss = new PgBoss({ connectionString: url, max: Math.max(...KS) + 2, supervise: false, schedule: false });
    boss.on("error", (e) => console.error("pg-boss:", e));
    await boss.start();
    bench.say(
      `bench:claims — ${N} jobs per run, ${REPS} runs per configuration (interleaved), Postgres 18 (embedded, fsync=off), ${availableParallelism()} cores, load average ${load()} at start\n`,
    );

    // Every configuration, by column; run REPS times round-robin so drift hits all alike.
    const columns: Array<{ name: string; run: (k: number) => Promise<number> }> = [
      { name: "ours b1", run: (k) => ours(k, 1, "now") },
      { name: "ours b8", run: (k) => ours(k, 8, "now") },
      // The same lifecycle with the first-come claim admission replaced (the baseline of its cost).
      { name: "ours b8 first-come", run: (k) => ours(k, 8, "now", "timer", false, "first-come") },
      // And with the admission claim as it was, re-planned on every execution.
      { name: "ours b8 replanned", run: (k) => ours(k, 8, "now", "timer", false, "replanned") },
      { name: "ours b16", run: (k) => ours(k, 16, "now") },
      // The same lifecycles on the jobs table as it was before migration 0024.
      { name: "ours b8 before", run: (k) => withTableBefore(() => ours(k, 8, "now")) },
      { name: "ours b16 before", run: (k) => withTableBefore(() => ours(k, 16, "now")) },
      { name: "ours b16 unprepared", run: (k) => ours(k, 16, "unprepared") },
      { name: "ours b8 hb every pass", run: (k) => ours(k, 8, "now", "perPass") },
      { name: "ours b8 pre-change", run: (k) => ours(k, 8, "pre-change") },
      { name: "graphile", run: (k) => graphile(k) },
      { name: "graphile lq16", run: (k) => graphile(k, { localQueue: 16 }) },
      { name: "pg-boss b1", run: (k) => pgBoss(boss, k, 1) },
      { name: "pg-boss b8", run: (k) => pgBoss(boss, k, 8) },
      { name: "pg-boss b16", run: (k) => pgBoss(boss, k, 16) },
    ];
    if (values.only) {
      const keep = values.only.split(",");
      columns.splice(0, columns.length, ...columns.filter((c) => keep.includes(c.name)));
    }
    const results = new Map<string, number[]>();
    // WAL bytes per job: the work Postgres did for a lifecycle, independent of the machine's load
    // (the timings above are not, on a shared machine).
    const wal = new Map<string, number[]>();
    const loads: string[] = [];
    for (let rep = 0; rep < REPS; rep++) {
      for (const k of KS) {
        for (const c of columns) {
          const key = `${k}|${c.name}`;
          results.set(key, [...(results.get(key) ?? []), await c.run(k)]);
          wal.set(key, [...(wal.get(key) ?? []), walBytes / N]);
        }
      }
      loads.push(load());
    }

    bench.say("whole lifecycles per second (claim/fetch → start → no-op → terminal write/complete), median (min–max)");
    for (const k of KS) {
      bench.say(`  ${k} claimer(s)/worker(s):`);
      for (const c of columns) {
        const key = `${k}|${c.name}`;
        bench.say(
          `    ${c.name.padEnd(22)} ${fmt(results.get(key) ?? []).padEnd(20)} WAL ${median(wal.get(key) ?? []).toFixed(0)} B/job`,
        );
      }
      const m = (name: string) => median(results.get(`${k}|${name}`) ?? []);
      const pairs: Array<[string, string, string]> = [
        ["b8/graphile", "ours b8", "graphile"],
        ["b16/graphile-lq16", "ours b16", "graphile lq16"],
        ["b8/pg-boss-b8", "ours b8", "pg-boss b8"],
        ["b16/pg-boss-b16", "ours b16", "pg-boss b16"],
        ["b1/pg-boss-b1", "ours b1", "pg-boss b1"],
        ["b8 now/pre-change", "ours b8", "ours b8 pre-change"],
        ["b8 admission/first-come", "ours b8", "ours b8 first-come"],
        ["b8 replanned/first-come", "ours b8 replanned", "ours b8 first-come"],
        ["b16/b16 unprepared", "ours b16", "ours b16 unprepared"],
        ["b8 now/before", "ours b8", "ours b8 before"],
        ["b16 now/before", "ours b16", "ours b16 before"],
      ];
      const ratios = pairs
        .filter(([, a, b]) => Number.isFinite(m(a) / m(b)))
        .map(([label, a, b]) => `${label} ${(m(a) / m(b)).toFixed(2)}×`);
      bench.say(`    ratios of medians: ${ratios.join(" · ")}`);
    }
    bench.say(`  load average after each round: ${loads.join(", ")}`);
    bench.say(
      `  heartbeat statements of ours (every ${DEFAULT_HEARTBEAT_MS} ms per claimer; every pass in "hb every pass"): ${heartbeatStatements}`,
    );

    // Where a lifecycle's WAL goes, from Postgres' own records: one run of each side, 4 claimers, B = 16.
    bench.say(
      "\nWAL by record type (pg_walinspect), one run each, 4 claimers, B = 16, bytes per job (records per job)",
    );
    for (const [label, run] of [
      ["now", () => ours(4, 16, "now")],
      ["before", () => withTableBefore(() => ours(4, 16, "now"))],
    ] as const) {
      await run();
      const rows = await walByRecord();
      const total = rows.reduce((a, x) => a + x.bytesPerJob, 0);
      const top = rows.slice(0, 6).map((x) => `${x.type} ${x.bytesPerJob.toFixed(0)} (${x.perJob.toFixed(2)})`);
      bench.say(`  ${label.padEnd(7)} ${total.toFixed(0)} B/job: ${top.join(" · ")}`);
    }

    bench.say("\nenqueue → started, idle claimer, 20 jobs/s, 300 jobs");
    const o = await oursLatency(300);
    const g = await graphileLatency(300);
    const f = (xs: number[]) => summary(xs, 1);
    bench.say(`  ours (NOTIFY → claim → start):   ${f(o.client)}`);
    bench.say(`  ours, Postgres clock (created→started): ${f(o.db)}`);
    bench.say(`  graphile-worker (add_job → task): ${f(g)}`);
    bench.say(`  load average ${load()}`);

    const ff = await admin.query("SELECT reloptions FROM pg_class WHERE oid = 'jobs'::regclass");
    bench.say(
      `\nbloat over whole lifecycles (4 claimers, B = 8), jobs ${(ff.rows[0]?.reloptions ?? ["fillfactor=100"]).join(", ")}`,
    );
    for (const mode of ["pre-change", "now"] as const) {
      const [b, a] = await bloat(mode);
      const upd = a.upd - b.upd;
      const hot = a.hot - b.hot;
      bench.say(
        `  ${mode.padEnd(10)}: ${upd} updates (${(upd / N).toFixed(1)} per job), ${hot} HOT (${((100 * hot) / upd).toFixed(0)}%), n_dead_tup ${b.dead} → ${a.dead}, heap ${b.sizeKb} → ${a.sizeKb} kB`,
      );
    }

    if (values.investigate) {
      bench.say("\ngraphile-worker at 1 and 4 workers: what moves the figure (3 runs each, alternating)");
      const variants: Array<[string, GraphileOpts]> = [
        ["as this bench runs it", {}],
        ["timed from before run() (start-up counted)", { fromRunnerStart: true }],
        ["no VACUUM between runs", { noVacuum: true }],
        ["maxPoolSize 10 (its default)", { maxPoolSize: 10 }],
      ];
      for (const [label, opts] of variants) {
        const by: Record<number, number[]> = { 1: [], 4: [] };
        for (let rep = 0; rep < 3; rep++) for (const k of [1, 4]) by[k]?.push(await graphile(k, opts));
        bench.say(
          `  ${label.padEnd(44)} 1 worker ${fmt(by[1] ?? [])} · 4 workers ${fmt(by[4] ?? [])}  (load ${load()})`,
        );
      }
    }
    bench.done({
      jobs: N,
      reps: REPS,
      lifecycles_per_s_median: Object.fromEntries([...results].map(([key, xs]) => [key, median(xs)])),
      wal_bytes_per_job_median: Object.fromEntries([...wal].map(([key, xs]) => [key, median(xs)])),
      enqueue_to_started_ms: { ours: dist(o.client), ours_db: dist(o.db), graphile: dist(g) },
    });
    await boss.stop({ graceful: false, wait: true });
  }
} finally {
  await admin.end();
  process.on("uncaughtException", (err) => {
    if (!String(err).includes("terminating connection due to administrator command")) throw err;
  });
  await pgs.stop();
}
