/**
 * tools/bridges/pg-proxy/main.ts against a real Postgres: the Neon driver's WebSocket Pool and its `neon()`
 * HTTP function both work through it, it refuses to tunnel anywhere else, and the repository
 * functions behave the same on drizzle node-postgres (plain `pg`) and drizzle neon-http (through
 * the proxy): one conformance suite, run once per driver.
 */
import { randomUUID } from "node:crypto";
import { Client as NeonClient, NeonDbError, Pool as NeonPool, neon, neonConfig } from "@neondatabase/serverless";
import { sql } from "drizzle-orm";
import { drizzle as drizzleNeonWs } from "drizzle-orm/neon-serverless";
import type pg from "pg";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import WebSocket from "ws";
import type { CreateJobBody } from "../../src/contracts/job";
import { createJob, decodeCursor, getJob, listJobs, tenantJobId } from "../../src/db/jobs-repo";
import { createNeonHttpDb } from "../../src/db/neon-http";
import { claimFromPostgres, type ExecutionIdentity, finishJobsMany, heartbeat } from "../../src/db/ownership-repo";
import { purgeFinishedJobs, wasPurged } from "../../src/db/retention-repo";
import * as schema from "../../src/db/schema";
import { type PgProxy, startPgProxy } from "../../tools/bridges/pg-proxy/main";
import { claimJob, finishJob, markStarted } from "../../tools/lib/single-row-writes";
import { applyMigrations } from "../../tools/stack/migrate";
import { freePort, waitFor } from "../../tools/stack/services/ports";
import { type PostgresService, startPostgres } from "../../tools/stack/services/postgres";
import { caught } from "../helpers/caught";
import { onEveryDriver, testPool } from "../helpers/db";

let postgres: PostgresService;
let proxy: PgProxy;
let admin: pg.Pool;
const neonPools: NeonPool[] = [];

/** The Neon driver's own application_name: counts the backends its WebSockets hold. */
const NEON_APP = "pkg:npm/%40neondatabase/serverless@1.2.0";

function neonPool(): NeonPool {
  const pool = new NeonPool({ connectionString: postgres.url, max: 4 });
  neonPools.push(pool);
  return pool;
}

/** Drizzle wraps driver errors (DrizzleQueryError); the Postgres code sits somewhere in the cause chain. */
function pgCode(err: unknown): string | undefined {
  for (let e = err as { code?: unknown; cause?: unknown } | undefined; e; e = e.cause as typeof e) {
    if (typeof e.code === "string" && /^[0-9A-Z]{5}$/.test(e.code)) return e.code;
  }
  return undefined;
}

function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.floor(s.length / 2)] as number;
}

beforeAll(async () => {
  postgres = await startPostgres();
  await applyMigrations(postgres.url);
  // pool.end() resolves before its clients' Terminate reaches Postgres; if the shutdown in
  // afterAll wins that race, the idle client reports 57P01 through the pool (testPool ignores it).
  admin = testPool(postgres.url, 2);
  proxy = await startPgProxy({ databaseUrl: postgres.url });
  const hostPort = new URL(proxy.url).host;
  neonConfig.wsProxy = (host, port) => `${hostPort}/v2?address=${host}:${port}`;
  neonConfig.useSecureWebSocket = false;
  neonConfig.pipelineTLS = false;
  neonConfig.pipelineConnect = false;
  neonConfig.webSocketConstructor = WebSocket;
  // Without it neon() derives "https://api.<host minus its first label>/sql" (api.0.0.1 here).
  neonConfig.fetchEndpoint = `${proxy.url}/sql`;
});

afterAll(async () => {
  await Promise.all(neonPools.map((p) => p.end().catch(() => {})));
  await proxy?.close();
  await admin?.end();
  await postgres?.stop();
});

describe("pg-proxy basics", () => {
  it("answers /healthz and 404s elsewhere", async () => {
    expect((await fetch(`${proxy.url}/healthz`)).status).toBe(200);
    expect((await fetch(`${proxy.url}/nope`)).status).toBe(404);
  });

  it("refuses to tunnel to any address but the configured Postgres", async () => {
    const pgPort = new URL(postgres.url).port;
    const upgradeStatus = (path: string) =>
      new Promise<number>((resolve, reject) => {
        const ws = new WebSocket(`${proxy.url.replace("http", "ws")}${path}`);
        ws.on("unexpected-response", (_req, res) => {
          resolve(res.statusCode ?? 0);
          ws.terminate();
        });
        ws.on("open", () => {
          ws.close();
          resolve(101);
        });
        ws.on("error", (err) => {
          if (!String(err).includes("Unexpected server response")) reject(err);
        });
      });
    const otherPort = await freePort();
    // Loopback-only candidates, so a broken proxy cannot send traffic off the machine.
    expect(await upgradeStatus(`/v2?address=127.0.0.1:${otherPort}`)).toBe(403);
    expect(await upgradeStatus(`/v2?address=127.0.0.2:${pgPort}`)).toBe(403);
    expect(await upgradeStatus("/v2")).toBe(403);
    expect(await upgradeStatus(`/other?address=127.0.0.1:${pgPort}`)).toBe(404);
    expect(await upgradeStatus(`/v2?address=127.0.0.1:${pgPort}`)).toBe(101);

    // And the Neon driver itself, pointed elsewhere, fails to connect instead of being relayed.
    const stray = new NeonClient({ connectionString: `postgres://postgres:postgres@127.0.0.1:${otherPort}/postgres` });
    stray.on("error", () => {});
    await expect(stray.connect()).rejects.toThrow();
  });
});

describe("Neon Pool over the WebSocket tunnel", () => {
  it("runs simple and parameterised queries", async () => {
    const pool = neonPool();
    const { rows } = await pool.query("select 1 as one, 'héllo 🌍' as t");
    expect(rows).toEqual([{ one: 1, t: "héllo 🌍" }]);
    const sum = await pool.query("select $1::int + $2::int as sum, $3::text as echoed", [40, 2, "ünïcode"]);
    expect(sum.rows[0]).toEqual({ sum: 42, echoed: "ünïcode" });
  });

  it("carries multi-megabyte values intact both ways", async () => {
    const big = Array.from({ length: 300_000 }, (_, i) => `${i.toString(36)}é`).join("|");
    const { rows } = await neonPool().query("select md5($1) as h, $1::text as echo", [big]);
    const expected = (await admin.query("select md5($1) as h", [big])).rows[0].h;
    expect(rows[0].h).toBe(expected);
    expect(rows[0].echo).toBe(big);
    expect(Buffer.byteLength(big)).toBeGreaterThan(2_000_000);
  });

  it("rolls a transaction back and commits another", async () => {
    const pool = neonPool();
    const client = await pool.connect();
    try {
      await client.query("begin");
      await client.query("insert into tenants (id, name) values ('ws-rolled-back', 'x')");
      expect((await client.query("select count(*)::int as n from tenants where id = 'ws-rolled-back'")).rows[0].n).toBe(
        1,
      );
      await client.query("rollback");
      await client.query("begin");
      await client.query("insert into tenants (id, name) values ('ws-committed', 'x')");
      await client.query("commit");
    } finally {
      client.release();
    }
    const seen = await admin.query("select id from tenants where id like 'ws-%' order by id");
    expect(seen.rows.map((r) => r.id)).toEqual(["ws-committed"]);
  });

  it("works under drizzle neon-serverless, transactions included", async () => {
    const db = drizzleNeonWs({ client: neonPool(), schema });
    await db.insert(schema.tenants).values({ id: "dz-ws", name: "Drizzle WS" });
    const [row] = await db.select().from(schema.tenants).where(sql`${schema.tenants.id} = 'dz-ws'`);
    expect(row?.name).toBe("Drizzle WS");
    expect(row?.createdAt).toBeInstanceOf(Date);
    const err = await caught(
      db.transaction(async (tx) => {
        await tx.insert(schema.tenants).values({ id: "dz-ws-tx", name: "never" });
        throw new Error("abort");
      }),
    );
    expect((err as Error).message).toBe("abort");
    expect((await admin.query("select 1 from tenants where id = 'dz-ws-tx'")).rowCount).toBe(0);
  });

  it("releases the Postgres backend when the client goes, and the client when the backend goes", async () => {
    const backends = async () =>
      Number(
        (await admin.query("select count(*) as n from pg_stat_activity where application_name = $1", [NEON_APP]))
          .rows[0].n,
      );
    const before = await backends();
    const client = new NeonClient({ connectionString: postgres.url });
    await client.connect();
    const pid = (await client.query("select pg_backend_pid() as pid")).rows[0].pid as number;
    expect(await backends()).toBe(before + 1);
    await client.end();
    await waitFor("backend to go", async () => (await backends()) === before, { timeoutMs: 5_000 });
    expect((await admin.query("select 1 from pg_stat_activity where pid = $1", [pid])).rowCount).toBe(0);

    const victim = new NeonClient({ connectionString: postgres.url });
    const ended = new Promise<void>((resolve) => victim.on("end", () => resolve()));
    victim.on("error", () => {});
    await victim.connect();
    const victimPid = (await victim.query("select pg_backend_pid() as pid")).rows[0].pid as number;
    await admin.query("select pg_terminate_backend($1)", [victimPid]);
    await ended;
    await expect(victim.query("select 1")).rejects.toThrow();
  });
});

describe("neon() over POST /sql", () => {
  const sqlFn = () => neon(postgres.url, { fullResults: false });
  const httpDb = () => createNeonHttpDb({ connectionString: postgres.url, fetchEndpoint: `${proxy.url}/sql` });

  it("round-trips types through the client's own parsers", async () => {
    const q = sqlFn();
    const u = randomUUID();
    const rows = await q`
      select ${JSON.stringify({ a: [1, "é"], b: null })}::jsonb as j, ${7}::int as i,
        ${"9007199254740993"}::bigint as big, ${u}::uuid as u, null::text as n,
        ${'héllo 🌍 中文 "q" \\ end'}::text as t, ${true}::boolean as b, array[1,2,3]::int[] as arr,
        ${"1.10"}::numeric as num, '2024-02-03T04:05:06.789Z'::timestamptz as ts`;
    expect(rows).toEqual([
      {
        j: { a: [1, "é"], b: null },
        i: 7,
        big: "9007199254740993",
        u,
        n: null,
        t: 'héllo 🌍 中文 "q" \\ end',
        b: true,
        arr: [1, 2, 3],
        num: "1.10",
        ts: expect.anything(),
      },
    ]);
    // drizzle's neon-http driver turns the shared timestamp parsers off (it maps columns itself),
    // so a raw query sees a Date or Postgres' text depending on whether one was built: either
    // way it must be the same instant.
    expect(new Date(rows[0]?.ts as string | Date).toISOString()).toBe("2024-02-03T04:05:06.789Z");

    // Through drizzle, as the gateway reads it: timestamptz → Date.
    const db = httpDb();
    const at = new Date("2024-02-03T04:05:06.789Z");
    await db.insert(schema.tenants).values({ id: "types", name: "ünï 🌍", createdAt: at });
    const [tenant] = await db.select().from(schema.tenants).where(sql`${schema.tenants.id} = 'types'`);
    expect(tenant).toEqual({
      id: "types",
      name: "ünï 🌍",
      createdAt: at,
      weight: 1,
      maxRunning: 0,
      dailyBudgetUsd: null,
      agentCount: 0,
      agentBytes: 0,
    });
  });

  it("runs a batch in one transaction with the requested options, all or nothing", async () => {
    const q = sqlFn();
    const [iso, ro] = (await q.transaction((tx) => [tx`show transaction_isolation`, tx`show transaction_read_only`], {
      isolationLevel: "Serializable",
      readOnly: true,
    })) as Array<Array<Record<string, string>>>;
    expect(iso?.[0]?.transaction_isolation).toBe("serializable");
    expect(ro?.[0]?.transaction_read_only).toBe("on");

    const err = await caught(
      q.transaction((tx) => [
        tx`insert into tenants (id, name) values ('batch-a', 'a')`,
        tx`insert into tenants (id, name) values ('batch-a', 'again')`,
      ]),
    );
    expect(err).toBeInstanceOf(NeonDbError);
    expect((err as NeonDbError).code).toBe("23505");
    expect((await admin.query("select 1 from tenants where id = 'batch-a'")).rowCount).toBe(0);

    const [pair] = (await q.transaction((tx) => [tx`select ${1}::int as x`, tx`select ${"y"} as y`])) as [unknown];
    expect(pair).toEqual([{ x: 1 }]);
  });

  it("surfaces a unique violation as a NeonDbError with Postgres' fields", async () => {
    const q = sqlFn();
    await q`insert into tenants (id, name) values ('dup', 'first')`;
    const err = await caught(q`insert into tenants (id, name) values ('dup', 'second')`);
    expect(err).toBeInstanceOf(NeonDbError);
    expect(err).toMatchObject({ code: "23505", constraint: "tenants_pkey", table: "tenants", severity: "ERROR" });
    expect((err as NeonDbError).detail).toContain("(id)=(dup)");

    const viaDrizzle = await caught(httpDb().insert(schema.tenants).values({ id: "dup", name: "third" }));
    expect(pgCode(viaDrizzle)).toBe("23505");
  });

  it("answers bad SQL, two statements, bad JSON and a foreign database with errors, not hangs", async () => {
    const q = sqlFn();
    const syntax = await caught(q`selec 1`);
    expect(syntax).toMatchObject({ code: "42601" });
    expect(await caught(q.query("select 1; select 2"))).toMatchObject({ code: "42601" });

    const bad = await fetch(`${proxy.url}/sql`, {
      method: "POST",
      headers: { "Neon-Connection-String": postgres.url },
      body: "{not json",
    });
    expect(bad.status).toBe(400);
    expect(((await bad.json()) as { message: string }).message).toMatch(/not valid JSON/);

    const foreign = neon(`postgres://postgres:postgres@127.0.0.1:${new URL(postgres.url).port}/other_db`);
    const refused = await caught(foreign`select 1`);
    expect(refused).toBeInstanceOf(NeonDbError);
    expect((refused as Error).message).toMatch(/serves only .*\/postgres; .*names .*\/other_db/);

    // The pool is still healthy after all that: a stray BEGIN is not left on a pooled connection.
    await q`begin`;
    expect(await q`select count(*)::int as open from pg_stat_activity where state = 'idle in transaction'`).toEqual([
      { open: 0 },
    ]);
  });
});

// ---- Conformance: the same repository behaviour on every driver ------------------------------

const body = (extra: Partial<CreateJobBody> = {}): CreateJobBody => ({
  input: { messages: [{ role: "user", content: "héllo 🌍" }] },
  ...extra,
});

onEveryDriver(
  "repository conformance",
  () => ({ admin, postgresUrl: postgres.url, proxyUrl: proxy.url }),
  (db) => {
    /** A claimed and started job owned by `host`. */
    async function started(host = "host-a"): Promise<ExecutionIdentity> {
      const { job } = await createJob(db(), "t1", randomUUID(), body());
      const token = randomUUID();
      const epoch = await claimJob(db(), job.id, host, token);
      const id = { jobId: job.id, host, epoch: epoch as number, token, executionId: randomUUID() };
      expect(await markStarted(db(), id)).toBe(true);
      return id;
    }

    it("createJob stores the job and an idempotent retry returns the same job", async () => {
      const plain = await createJob(db(), "t1", randomUUID(), body({ tools: ["shell"], metadata: { k: "v" } }));
      expect(plain.created).toBe(true);
      expect(plain.job).toMatchObject({ tenantId: "t1", state: "queued", epoch: 0, owner: null, tools: ["shell"] });
      expect(plain.job.input).toEqual(body().input);
      expect(plain.job.metadata).toEqual({ k: "v" });
      expect(plain.job.createdAt).toBeInstanceOf(Date);

      const first = await createJob(db(), "t1", randomUUID(), body({ idempotency_key: "k-1" }));
      const retry = await createJob(db(), "t1", randomUUID(), body({ idempotency_key: "k-1" }));
      expect(first.created).toBe(true);
      expect(retry.created).toBe(false);
      expect(retry.job.id).toBe(first.job.id);
      const otherTenant = await createJob(db(), "t2", randomUUID(), body({ idempotency_key: "k-1" }));
      expect(otherTenant.created).toBe(true);
      expect(otherTenant.job.id).not.toBe(first.job.id);
    });

    it("purgeFinishedJobs (the Worker cron's driver too) purges only old finished jobs, batch by batch, and wasPurged answers for the tenant", async () => {
      const old = (await createJob(db(), "t1", randomUUID(), body())).job.id;
      const queued = (await createJob(db(), "t1", randomUUID(), body())).job.id;
      await admin.query("update jobs set state = 'completed', finished_at = now() - interval '2 hours' where id = $1", [
        old,
      ]);
      expect((await tenantJobId(db(), "t1", old))?.finishedAt).toBeInstanceOf(Date);
      expect(await purgeFinishedJobs(db(), { olderThanMs: 3_600_000, batchSize: 1 })).toEqual({
        purged: 1,
        batches: 2,
      });
      expect(await getJob(db(), "t1", old)).toBeNull();
      expect((await getJob(db(), "t1", queued))?.state).toBe("queued");
      expect(await wasPurged(db(), "t1", old)).toBe(true);
      expect(await wasPurged(db(), "t2", old)).toBe(false);
      expect(await wasPurged(db(), "t1", queued)).toBe(false);
    });

    it("getJob answers only the owning tenant", async () => {
      const { job } = await createJob(db(), "t1", randomUUID(), body());
      expect((await getJob(db(), "t1", job.id))?.id).toBe(job.id);
      expect(await getJob(db(), "t2", job.id)).toBeNull();
      expect(await getJob(db(), "t1", randomUUID())).toBeNull();
      expect(await getJob(db(), "t1", "not-a-uuid")).toBeNull();
    });

    it("listJobs pages newest first without skipping or repeating, ties and sub-millisecond times included", async () => {
      const ids: string[] = [];
      for (let i = 0; i < 9; i++) ids.push((await createJob(db(), "t1", randomUUID(), body())).job.id);
      await createJob(db(), "t2", randomUUID(), body());
      // Three share one timestamp (ties broken by id); two differ only below the millisecond,
      // which a JavaScript Date cannot hold.
      await admin.query("update jobs set created_at = '2024-01-01T00:00:00.500Z' where id = any($1::uuid[])", [
        ids.slice(0, 3),
      ]);
      await admin.query("update jobs set created_at = '2024-01-01T00:00:00.123400Z' where id = $1", [ids[3]]);
      await admin.query("update jobs set created_at = '2024-01-01T00:00:00.123456Z' where id = $1", [ids[4]]);
      const expected = (
        await admin.query("select id from jobs where tenant_id = 't1' order by created_at desc, id desc")
      ).rows.map((r) => r.id as string);

      for (const limit of [1, 2, 4]) {
        const seen: string[] = [];
        let cursor: string | null = null;
        for (let pages = 0; pages < 20; pages++) {
          const decoded = cursor ? decodeCursor(cursor) : undefined;
          if (cursor) expect(decoded).not.toBeNull();
          const page = await listJobs(db(), "t1", { limit, cursor: decoded ?? undefined });
          expect(page.jobs.length).toBeLessThanOrEqual(limit);
          seen.push(...page.jobs.map((j) => j.id));
          cursor = page.nextCursor;
          if (!cursor) break;
        }
        expect(seen).toEqual(expected);
      }
      expect((await listJobs(db(), "t1", { limit: 100, state: "running" })).jobs).toEqual([]);
    });

    it("claimJob has exactly one winner and bumps the epoch", async () => {
      const { job } = await createJob(db(), "t1", randomUUID(), body());
      const outcomes = await Promise.all(
        ["h1", "h2", "h3", "h4"].map((host) => claimJob(db(), job.id, host, randomUUID())),
      );
      expect(outcomes.filter((e) => e !== null)).toEqual([1]);
      expect(await claimJob(db(), job.id, "late", randomUUID())).toBeNull();
    });

    it("markStarted is fenced by host, epoch and token", async () => {
      const { job } = await createJob(db(), "t1", randomUUID(), body());
      const token = randomUUID();
      const epoch = (await claimJob(db(), job.id, "host-a", token)) as number;
      const id = { jobId: job.id, host: "host-a", epoch, token, executionId: randomUUID() };
      expect(await markStarted(db(), { ...id, token: randomUUID() })).toBe(false);
      expect(await markStarted(db(), { ...id, epoch: epoch + 1 })).toBe(false);
      expect(await markStarted(db(), { ...id, host: "host-b" })).toBe(false);
      expect(await markStarted(db(), id)).toBe(true);
      expect(await markStarted(db(), { ...id, executionId: randomUUID() })).toBe(false);
      const row = await getJob(db(), "t1", job.id);
      expect(row).toMatchObject({ state: "running", executionId: id.executionId, epoch });
      expect(row?.startedAt).toBeInstanceOf(Date);
      // The execution keeps its claim token: the gateway derives the execution's ingest key from it.
      const exec = await admin.query("select host, epoch, token from executions where id = $1", [id.executionId]);
      expect(exec.rows).toEqual([{ host: "host-a", epoch, token }]);
    });

    it("timing facts ride on the heartbeat and the batched terminal write, once and only for the owner", async () => {
      const id = await started();
      const facts = { prepared_at: performance.now() };
      expect(await heartbeat(db(), [{ ...id, token: randomUUID(), facts }])).toEqual(new Set());
      expect((await getJob(db(), "t1", id.jobId))?.preparedAt).toBeNull();
      expect(await heartbeat(db(), [{ ...id, facts }])).toEqual(new Set([id.executionId]));
      const first = (await getJob(db(), "t1", id.jobId))?.preparedAt;
      expect(first).toBeInstanceOf(Date);
      const other = await started();
      const done = await finishJobsMany(db(), [
        {
          id,
          outcome: { state: "completed", output: "one, two" },
          facts: { prepared_at: performance.now(), first_output_at: performance.now() },
        },
        { id: { ...other, epoch: other.epoch + 1 }, outcome: { state: "completed", output: "stale" } },
      ]);
      expect(done.map((d) => d.written)).toEqual([true, false]);
      expect(done[0]?.facts?.finished_at).toBeInstanceOf(Date);
      const row = await getJob(db(), "t1", id.jobId);
      expect([row?.state, row?.output, row?.preparedAt]).toEqual(["completed", "one, two", first]);
      expect(row?.firstOutputAt).toBeInstanceOf(Date);
      expect((await getJob(db(), "t1", other.jobId))?.state).toBe("running");
    });

    it("heartbeat returns only the running executions whose whole identity, host included, owns the row", async () => {
      const mine = await started("host-a");
      const theirs = await started("host-b");
      // host-a naming host-b's execution under its own host id: the row's owner is host-b.
      const live = await heartbeat(db(), [mine, { ...theirs, host: "host-a" }]);
      expect([...live]).toEqual([mine.executionId]);
      expect(await heartbeat(db(), [])).toEqual(new Set());
    });

    it("finishJob is fenced and writes the terminal state once", async () => {
      const id = await started();
      const failed = {
        state: "failed" as const,
        error: { code: "provider_error" as const, message: "boom" },
        output: "partial",
      };
      expect(await finishJob(db(), { ...id, executionId: randomUUID() }, failed)).toBe(false);
      expect(await finishJob(db(), { ...id, epoch: id.epoch + 1 }, failed)).toBe(false);
      expect(await finishJob(db(), id, failed)).toBe(true);
      expect(await finishJob(db(), id, { state: "completed", output: "again" })).toBe(false);
      const row = await getJob(db(), "t1", id.jobId);
      expect(row).toMatchObject({ state: "failed", output: "partial", error: failed.error });
      expect(row?.finishedAt).toBeInstanceOf(Date);
      const exec = await admin.query("select outcome, finished_at is not null as done from executions where id = $1", [
        id.executionId,
      ]);
      expect(exec.rows).toEqual([{ outcome: "failed", done: true }]);
    });

    it("claimFromPostgres claims the oldest first, one distinct token each", async () => {
      const ids: string[] = [];
      for (let i = 0; i < 4; i++) ids.push((await createJob(db(), i % 2 ? "t1" : "t2", randomUUID(), body())).job.id);
      for (const [i, id] of ids.entries()) {
        await admin.query("update jobs set created_at = $2 where id = $1", [
          id,
          new Date(Date.UTC(2024, 0, 1, 0, 0, 4 - i)),
        ]);
      }
      // ids[3] is now the oldest, then ids[2], ...; claim the oldest one first by hand.
      expect(await claimJob(db(), ids[3] as string, "other", randomUUID())).toBe(1);
      const tokens = [randomUUID(), randomUUID()];
      const claimed = await claimFromPostgres(db(), "host-p", tokens);
      expect(claimed.map((c) => c.jobId).sort()).toEqual([ids[2], ids[1]].sort());
      expect(claimed.find((c) => c.jobId === ids[2])).toEqual({ jobId: ids[2], epoch: 1, token: tokens[0] });
      expect(claimed.find((c) => c.jobId === ids[1])).toEqual({ jobId: ids[1], epoch: 1, token: tokens[1] });
      const rest = await claimFromPostgres(db(), "host-q", [randomUUID(), randomUUID()]);
      expect(rest.map((c) => c.jobId)).toEqual([ids[0]]);
      expect(await claimFromPostgres(db(), "host-q", [randomUUID()])).toEqual([]);
    });
  },
);

describe("round trips", () => {
  it("measures select 1 through /sql and through the WebSocket Pool", async () => {
    const q = neon(postgres.url);
    const pool = neonPool();
    const time = async (fn: () => Promise<unknown>) => {
      for (let i = 0; i < 10; i++) await fn();
      const samples: number[] = [];
      for (let i = 0; i < 100; i++) {
        const t0 = performance.now();
        await fn();
        samples.push(performance.now() - t0);
      }
      return median(samples);
    };
    const http = await time(() => q`select 1`);
    const wsPool = await time(() => pool.query("select 1"));
    const direct = await time(() => admin.query("select 1"));
    console.log(
      `select 1 median over 100: /sql ${http.toFixed(2)} ms, WebSocket Pool ${wsPool.toFixed(2)} ms, direct pg ${direct.toFixed(2)} ms`,
    );
    expect(Number.isFinite(http) && Number.isFinite(wsPool)).toBe(true);
  });
});
