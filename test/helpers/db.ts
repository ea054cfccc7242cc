/**
 * Per-suite Postgres for integration tests: one embedded server, migrated once, and a fresh
 * database per call cloned from the migrated template (graphile-worker's habit), so tests never
 * see each other's rows. Suites take it as the `postgresTest` fixture (postgres-fixture.ts) rather
 * than starting and stopping it in their own hooks.
 */
import { drizzle } from "drizzle-orm/node-postgres";
import pg from "pg";
import { beforeEach, describe } from "vitest";
import type { Db } from "../../src/db/client";
import { createNeonHttpDb } from "../../src/db/neon-http";
import * as schema from "../../src/db/schema";
import { applyMigrations } from "../../tools/stack/migrate";
import { type PostgresService, startPostgres } from "../../tools/stack/services/postgres";

export interface TestDb {
  url: string;
  pool: pg.Pool;
  db: ReturnType<typeof drizzle<typeof schema>>;
  close(): Promise<void>;
}

export async function startTestPostgres(): Promise<{
  server: PostgresService;
  freshDb(max?: number): Promise<TestDb>;
  stop(): Promise<void>;
}> {
  const server = await startPostgres();
  const templateUrl = server.url.replace(/\/postgres$/, "/ear_template");
  const admin = new pg.Client({ connectionString: server.url });
  // Stopping Postgres at teardown ends idle connections (57P01): not a test failure.
  admin.on("error", () => {});
  await admin.connect();
  await admin.query("CREATE DATABASE ear_template");
  await applyMigrations(templateUrl);
  let n = 0;
  const opened: TestDb[] = [];
  return {
    server,
    async freshDb(max = 10) {
      const name = `ear_test_${process.pid}_${++n}`;
      await admin.query(`CREATE DATABASE ${name} TEMPLATE ear_template`);
      const url = server.url.replace(/\/postgres$/, `/${name}`);
      const pool = testPool(url, max);
      const t: TestDb = { url, pool, db: drizzle(pool, { schema }), close: () => pool.end() };
      opened.push(t);
      return t;
    },
    async stop() {
      for (const t of opened) await t.close().catch(() => {});
      await admin.end().catch(() => {});
      await server.stop();
    },
  };
}

/**
 * Empty the job tables and leave exactly tenants t1 and t2: the starting point of the suites that
 * run the same repository checks on every driver (`admin` is a plain pg pool on the database).
 */
export async function resetToTwoTenants(admin: pg.Pool, db: Db): Promise<void> {
  await admin.query(
    "truncate executions, jobs, api_keys, agent_versions, agents, model_usage, tenants, purged_jobs cascade",
  );
  await db.insert(schema.tenants).values([
    { id: "t1", name: "Tenant One" },
    { id: "t2", name: "Tenant Two" },
  ]);
}

/**
 * A pg pool for a test: its idle clients may see the server stop at teardown (57P01, "terminating
 * connection due to administrator command"), which is not a test failure, so the pool's error
 * event is handled (unhandled, it fails the whole run as an error outside any test).
 */
export function testPool(connectionString: string, max: number): pg.Pool {
  const pool = new pg.Pool({ connectionString, max });
  pool.on("error", () => {});
  return pool;
}

export interface DriverTarget {
  /** A pool on the test database (node-postgres runs its queries through it). */
  admin: pg.Pool;
  postgresUrl: string;
  /** The local Postgres proxy (tools/bridges/pg-proxy/main.ts) whose /sql the Neon HTTP driver talks to. */
  proxyUrl: string;
}

/**
 * `tests` once per driver the runtime uses: node-postgres (hosts) and Neon's SQL-over-HTTP through
 * the local proxy (gateway), each test starting from resetToTwoTenants. `db()` is the handle of
 * the driver running. `target` is read when the tests run (the servers start in beforeAll).
 */
export function onEveryDriver(title: string, target: () => DriverTarget, tests: (db: () => Db) => void): void {
  const drivers: Array<[string, () => Db]> = [
    ["node-postgres (pg)", () => drizzle({ client: target().admin, schema }) as unknown as Db],
    [
      "neon-http (through pg-proxy /sql)",
      () => createNeonHttpDb({ connectionString: target().postgresUrl, fetchEndpoint: `${target().proxyUrl}/sql` }),
    ],
  ];
  for (const [driver, getDb] of drivers) {
    describe(`${title}: ${driver}`, () => {
      let db: Db;
      beforeEach(async () => {
        db = getDb();
        await resetToTwoTenants(target().admin, db);
      });
      tests(() => db);
    });
  }
}
