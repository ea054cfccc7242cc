/**
 * The integration suites' Postgres as vitest fixtures (`test.extend`), instead of the same
 * beforeAll/afterAll block copied into each file: `postgres` is one embedded server per file with
 * the migrated template (startTestPostgres, db.ts), `testDb` one fresh database of it for the
 * file, with the tenants the suite names. Both are file-scoped: made on first use (a test or a
 * suite-level hook that asks for them) and torn down once the file's tests are done, so a file
 * whose tests are all skipped starts no Postgres. `caseDb` is the same as `testDb` but one per
 * test, for a file whose cases must not see each other's rows (they reuse tenant names, or count
 * every row of a table); it is closed when its test ends.
 *
 *   const test = postgresTest({ connections: 8, tenants: ["t1"] });
 *   test.beforeAll(({ testDb }) => { t = testDb; });     // or take `testDb` in a test
 *   test.beforeEach(({ caseDb }) => { t = caseDb; });    // a database per test
 *
 * `newJob` is the one way the suites insert a plain queued job.
 */
import { randomUUID } from "node:crypto";
import { test as base } from "vitest";
import type { Db } from "../../src/db/client";
import { jobs, tenants } from "../../src/db/schema";
import { startTestPostgres, type TestDb } from "./db";

export interface PostgresTestOptions {
  /** The pool size of the file's database (its `pool` and `db`). */
  connections?: number;
  /** Tenants inserted into the file's database, each named as its id. */
  tenants?: string[];
}

export function postgresTest({ connections = 10, tenants: tenantIds = [] }: PostgresTestOptions = {}) {
  const fresh = async (postgres: Awaited<ReturnType<typeof startTestPostgres>>): Promise<TestDb> => {
    const t = await postgres.freshDb(connections);
    if (tenantIds.length > 0) await t.db.insert(tenants).values(tenantIds.map((id) => ({ id, name: id })));
    return t;
  };
  return base
    .extend(
      "postgres",
      { scope: "file" },
      // biome-ignore lint/correctness/noEmptyPattern: vitest reads a fixture's dependencies from its destructuring; none here
      async ({}, { onCleanup }) => {
        const server = await startTestPostgres();
        onCleanup(() => server.stop());
        return server;
      },
    )
    .extend("testDb", { scope: "file" }, ({ postgres }) => fresh(postgres))
    .extend("caseDb", async ({ postgres }, { onCleanup }) => {
      const t = await fresh(postgres);
      onCleanup(() => t.close());
      return t;
    });
}

/** A queued job with a one-message input, inserted as it is (no repository logic); its id. */
export async function newJob(db: Db, extra: Partial<typeof jobs.$inferInsert> = {}): Promise<string> {
  const id = randomUUID();
  await db.insert(jobs).values({ id, tenantId: "t1", input: { messages: [{ role: "user", content: "x" }] }, ...extra });
  return id;
}
