/**
 * Retention in Postgres: finished jobs older than the retention go with their executions and
 * inputs, in batches, leaving tombstones; queued, running, recent and cleanup-pending jobs stay.
 * Then end to end: a host's reaper purges on its own, and the gateway answers 410 for a purged
 * job and for a job whose event log is past its retention.
 */
import { randomUUID } from "node:crypto";
import type pg from "pg";
import { describe, expect, it } from "vitest";
import { purgeFinishedJobs } from "../../src/db/retention-repo";
import { apiClient } from "../helpers/api";
import type { TestDb } from "../helpers/db";
import { postgresTest } from "../helpers/postgres-fixture";
import { requireBinary } from "../helpers/require";
import { useStack } from "../helpers/stack";

const canRun = await requireBinary("redis-server", "apt-get install redis-server");
const DAY_MS = 86_400_000;
const RETENTION_MS = 30 * DAY_MS;

/** A typical job: a short prompt, a ~1 KB answer, one execution, one applied input. */
async function seedJobs(
  pool: pg.Pool,
  tenantId: string,
  n: number,
  opts: { state: string; finishedAgoMs: number | null; cleanupPending?: boolean },
): Promise<string[]> {
  const ids = Array.from({ length: n }, () => randomUUID());
  // One transaction: a host's purge running between the statements would delete the job before
  // its execution row is inserted (a foreign-key error, seen once under load).
  const client = await pool.connect();
  try {
    await client.query("BEGIN");
    await insertRows(client, ids, tenantId, opts);
    await client.query("COMMIT");
  } catch (err) {
    await client.query("ROLLBACK");
    throw err;
  } finally {
    client.release();
  }
  return ids;
}

async function insertRows(
  pool: pg.PoolClient,
  ids: string[],
  tenantId: string,
  opts: { state: string; finishedAgoMs: number | null; cleanupPending?: boolean },
): Promise<void> {
  await pool.query(
    // A running job has an owner (the jobs_running_owner_ck constraint): the execution's host.
    `INSERT INTO jobs (id, tenant_id, state, input, output, created_at, finished_at, cleanup_pending, epoch, execution_id, owner)
     SELECT id, $2, $3, $4::jsonb, $5, now() - interval '40 days',
       CASE WHEN $6::bigint IS NULL THEN NULL ELSE now() - make_interval(secs => $6::bigint / 1000.0) END, $7, 1, id,
       CASE WHEN $3 = 'running' THEN 'host-a' END
     FROM unnest($1::uuid[]) AS id`,
    [
      ids,
      tenantId,
      opts.state,
      JSON.stringify({
        messages: [{ role: "user", content: "Summarise the attached report in three bullet points." }],
      }),
      "x".repeat(1000),
      opts.finishedAgoMs,
      opts.cleanupPending ?? false,
    ],
  );
  await pool.query(
    `INSERT INTO executions (id, job_id, host, epoch, token, finished_at, outcome)
     SELECT id, id, 'host-a', 1, gen_random_uuid(), now(), 'completed' FROM unnest($1::uuid[]) AS id`,
    [ids],
  );
  await pool.query(
    `INSERT INTO job_inputs (job_id, tenant_id, content, status)
     SELECT id, $2, 'also mention the risks', 'applied' FROM unnest($1::uuid[]) AS id`,
    [ids, tenantId],
  );
}

async function count(pool: pg.Pool, table: string, ids: string[]): Promise<number> {
  const col = table === "jobs" || table === "purged_jobs" ? "id" : "job_id";
  const { rows } = await pool.query(`SELECT count(*)::int AS n FROM ${table} WHERE ${col} = ANY($1::uuid[])`, [ids]);
  return rows[0].n;
}

async function sizes(pool: pg.Pool): Promise<Record<string, number>> {
  const { rows } = await pool.query(
    `SELECT t, pg_total_relation_size(t)::bigint AS bytes
     FROM unnest(array['jobs', 'executions', 'job_inputs', 'purged_jobs']) AS t`,
  );
  return Object.fromEntries(rows.map((r) => [r.t, Number(r.bytes)]));
}

// File-scoped fixtures are declared at the top level of the file.
const test = postgresTest({ tenants: ["t1"] });

describe("purgeFinishedJobs", () => {
  let t: TestDb;
  test.beforeAll(({ testDb }) => {
    t = testDb;
  });

  it("deletes only finished jobs past the retention, with their executions and inputs, in batches, and leaves tombstones", async () => {
    const old = await seedJobs(t.pool, "t1", 1200, { state: "completed", finishedAgoMs: RETENTION_MS + DAY_MS });
    const oldFailed = await seedJobs(t.pool, "t1", 5, { state: "lost", finishedAgoMs: RETENTION_MS + DAY_MS });
    const recent = await seedJobs(t.pool, "t1", 5, { state: "completed", finishedAgoMs: RETENTION_MS - DAY_MS });
    const running = await seedJobs(t.pool, "t1", 5, { state: "running", finishedAgoMs: null });
    const queued = await seedJobs(t.pool, "t1", 5, { state: "queued", finishedAgoMs: null });
    const cleaning = await seedJobs(t.pool, "t1", 5, {
      state: "failed",
      finishedAgoMs: RETENTION_MS + DAY_MS,
      cleanupPending: true,
    });
    const doomed = [...old, ...oldFailed];

    const before = await sizes(t.pool);
    // Two purgers at once (two hosts' reapers): SKIP LOCKED gives them disjoint batches.
    const [a, b] = await Promise.all([
      purgeFinishedJobs(t.db, { olderThanMs: RETENTION_MS, batchSize: 500 }),
      purgeFinishedJobs(t.db, { olderThanMs: RETENTION_MS, batchSize: 500 }),
    ]);
    expect(a.purged + b.purged).toBe(doomed.length);
    expect(a.batches + b.batches).toBeGreaterThanOrEqual(3); // 1205 jobs at 500 a statement
    for (const table of ["jobs", "executions", "job_inputs"]) expect(await count(t.pool, table, doomed)).toBe(0);
    expect(await count(t.pool, "purged_jobs", doomed)).toBe(doomed.length);
    const kept = [...recent, ...running, ...queued, ...cleaning];
    for (const table of ["jobs", "executions", "job_inputs"])
      expect(await count(t.pool, table, kept)).toBe(kept.length);
    expect(await count(t.pool, "purged_jobs", kept)).toBe(0);
    // Idempotent: nothing left to purge.
    expect(await purgeFinishedJobs(t.db, { olderThanMs: RETENTION_MS })).toEqual({ purged: 0, batches: 1 });

    // Storage: what a job costs while kept, and what its tombstone costs after. DELETE leaves the
    // space to autovacuum for reuse; VACUUM FULL here shows the bytes the purge gave back.
    await t.pool.query("VACUUM FULL jobs, executions, job_inputs, purged_jobs");
    const after = await sizes(t.pool);
    const n = doomed.length;
    const perJob = (k: string) => Math.round(((before[k] ?? 0) - (after[k] ?? 0)) / n);
    const report = {
      jobs: perJob("jobs"),
      executions: perJob("executions"),
      job_inputs: perJob("job_inputs"),
      tombstone: Math.round(((after.purged_jobs ?? 0) - (before.purged_jobs ?? 0)) / n),
    };
    console.log(
      `retention: Postgres bytes per job (${n} jobs) before → after: ${JSON.stringify({ before, after, report })}`,
    );
    expect(report.jobs).toBeGreaterThan(report.tombstone);
    expect(after.jobs).toBeLessThan(before.jobs ?? 0);
  });
});

describe.skipIf(!canRun)("retention end to end", () => {
  const s = useStack({
    hosts: 1,
    // A fleet with nothing queued or running is idle: the purge then runs in the idle passes,
    // every HOST_IDLE_MS (docs/deploy.md §10), so that is shortened too. No sleep
    // (HOST_SLEEP_MAX_MS=0): this test seeds finished jobs straight into Postgres, which no
    // sleeping host hears of (a deployment's jobs finish through a host, which is awake then).
    hostEnv: {
      HOST_SLEEP_MAX_MS: "0",
      SANDBOX_ENABLED: "false",
      HOST_REAP_MS: "200",
      HOST_PURGE_MS: "1000",
      HOST_IDLE_MS: "1000",
      JOB_RETENTION_S: "3600",
    },
  });

  it("the host's reaper purges a job past the retention; GET answers 410 gone, its events 410 too", async () => {
    const api = apiClient(s.stack.gatewayUrl, s.stack.apiKey);
    const [purged] = await seedJobs(s.pool, s.stack.tenantId, 1, { state: "completed", finishedAgoMs: 2 * 3_600_000 });
    // Past the event log's 7-day retention; its cleanup is pending, so the purge keeps its row.
    const [kept] = await seedJobs(s.pool, s.stack.tenantId, 1, {
      state: "completed",
      finishedAgoMs: 8 * DAY_MS,
      cleanupPending: true,
    });

    const deadline = Date.now() + 20_000;
    while (Date.now() < deadline && (await count(s.pool, "jobs", [purged as string])) > 0) {
      await new Promise((r) => setTimeout(r, 200));
    }
    expect(await count(s.pool, "jobs", [purged as string])).toBe(0);

    const gone = await api.call<{ error: { code: string } }>("GET", `/v1/jobs/${purged}`);
    expect(gone.status).toBe(410);
    expect(gone.body.error.code).toBe("gone");
    const goneEvents = await api.call<{ error: { code: string } }>("GET", `/v1/jobs/${purged}/events`);
    expect(goneEvents.status).toBe(410);
    expect(goneEvents.body.error.code).toBe("gone");
    for (const [method, path] of [
      ["POST", `/v1/jobs/${purged}/cancel`],
      ["GET", `/v1/jobs/${purged}/inputs`],
    ] as const) {
      const res = await api.call<{ error: { code: string } }>(method, path);
      expect([path, res.status, res.body.error.code]).toEqual([path, 410, "gone"]);
    }

    // The row is kept (cleanup pending), its event log is past JOB_EVENTS_RETENTION_S (7 days).
    expect((await api.call("GET", `/v1/jobs/${kept}`)).status).toBe(200);
    const expired = await api.call<{ error: { code: string } }>("GET", `/v1/jobs/${kept}/events`);
    expect(expired.status).toBe(410);
    expect(expired.body.error.code).toBe("events_expired");

    // An id that never named a job stays 404.
    expect((await api.call("GET", `/v1/jobs/${randomUUID()}`)).status).toBe(404);
  }, 60_000);
});
