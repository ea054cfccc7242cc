/**
 * The owner's half of the held-run watch (sandbox-host/lifecycle/held-watch.ts, holdRunsLock)
 * against real Postgres: every session of the lease pool has the lost bound as its
 * idle_session_timeout and holds the shared lock before its first statement runs, with no
 * statement sent while the try is in flight (node-postgres warns "Calling client.query() when the
 * client is already executing a query" for that, and pg 9 refuses it); a session that could not
 * take the lock (an exclusive request was queued) takes it on a later checkout.
 */
import pg from "pg";
import { afterEach, expect, it } from "vitest";
import {
  HELD_LOCK_RETRY_MS,
  HELD_RUNS_LOCK,
  HOST_LOCK_CLASS,
  holdRunsLock,
  hostLockKey,
} from "../../sandbox-host/lifecycle/held-watch";
import { silentLogger } from "../../sandbox-host/log";
import { sleep } from "../../src/domain/async";
import type { TestDb } from "../helpers/db";
import { postgresTest } from "../helpers/postgres-fixture";

const test = postgresTest({ connections: 2 });
let t: TestDb;
test.beforeAll(({ testDb }) => {
  t = testDb;
});

const warnings: string[] = [];
const onWarning = (w: Error) => warnings.push(`${w.name}: ${w.message}`);
process.on("warning", onWarning);
const pools: pg.Pool[] = [];
afterEach(async () => {
  for (const p of pools.splice(0)) await p.end().catch(() => {});
});

function leasePool(): pg.Pool {
  const pool = new pg.Pool({ connectionString: t.url, max: 2 });
  pool.on("error", () => {});
  holdRunsLock(pool, { lostAfterMs: 8000, log: silentLogger, hostId: HOST });
  pools.push(pool);
  return pool;
}

const HOST = "held-lock-test-host";

/** The backends holding this host's own lock (the other owners' watch waits on it) in shared mode. */
async function ownHolders(): Promise<number[]> {
  const { rows } = await t.pool.query<{ pid: number }>(
    `SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND mode = 'ShareLock' AND granted
       AND classid = $1::bigint::oid AND objid = ($2::bigint & 4294967295)::oid AND objsubid = 2`,
    [HOST_LOCK_CLASS, hostLockKey(HOST)],
  );
  return rows.map((r) => r.pid);
}

/** The backends holding the held-runs lock in shared mode. */
async function holders(): Promise<number[]> {
  const { rows } = await t.pool.query<{ pid: number }>(
    `SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND mode = 'ShareLock' AND granted
       AND ((classid::bigint << 32) | objid::bigint) = $1::bigint`,
    [HELD_RUNS_LOCK],
  );
  return rows.map((r) => r.pid);
}

it("takes the lock and the timeout before a new session's first statement, never alongside it", async () => {
  const pool = leasePool();
  // Two sessions at once (both of the pool's), by query and by checkout (a transaction's path).
  const [a, b] = await Promise.all([
    pool.query<{ pid: number; timeout: string }>(
      "SELECT pg_backend_pid() AS pid, current_setting('idle_session_timeout') AS timeout",
    ),
    (async () => {
      const client = await pool.connect();
      try {
        await client.query("BEGIN");
        const r = await client.query<{ pid: number; timeout: string }>(
          "SELECT pg_backend_pid() AS pid, current_setting('idle_session_timeout') AS timeout",
        );
        await client.query("COMMIT");
        return r;
      } finally {
        client.release();
      }
    })(),
  ]);
  const pids = [a.rows[0]?.pid, b.rows[0]?.pid];
  expect(new Set(pids).size).toBe(2);
  expect([a.rows[0]?.timeout, b.rows[0]?.timeout]).toEqual(["8s", "8s"]);
  expect((await holders()).sort()).toEqual([...pids].sort());
  expect((await ownHolders()).sort()).toEqual([...pids].sort());
  // Let a deferred process warning (emitted on the next tick) arrive.
  await sleep(50);
  expect(warnings.filter((w) => /already executing a query/.test(w))).toEqual([]);
});

it("a session that found an exclusive request queued takes the lock on a later checkout", async () => {
  const exclusive = new pg.Client({ connectionString: t.url });
  exclusive.on("error", () => {});
  await exclusive.connect();
  try {
    await exclusive.query(`SELECT pg_advisory_lock(${HELD_RUNS_LOCK})`);
    const pool = leasePool();
    const { rows } = await pool.query<{ pid: number }>("SELECT pg_backend_pid() AS pid");
    expect(await holders()).toEqual([]);
    await exclusive.query(`SELECT pg_advisory_unlock(${HELD_RUNS_LOCK})`);
    // Not before HELD_LOCK_RETRY_MS: an owner only tries that often while it holds none.
    await pool.query("SELECT 1");
    expect(await holders()).toEqual([]);
    await sleep(HELD_LOCK_RETRY_MS + 100);
    await pool.query("SELECT 1");
    expect(await holders()).toEqual([rows[0]?.pid]);
  } finally {
    await exclusive.end().catch(() => {});
  }
}, 20_000);
