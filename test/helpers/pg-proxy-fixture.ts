/**
 * The file's database (`postgresTest`'s `testDb`) behind the local pg-proxy
 * (tools/bridges/pg-proxy/main.ts), for the suites that run the same checks through both drivers
 * the runtime uses (`onEveryDriver`, db.ts): the proxy starts before the file's first test and
 * closes after its last. `neonConfig.fetchEndpoint` points at it too, so a `neon()` a suite makes
 * itself reaches the same database.
 *
 *   const target = proxiedPostgres({ connections: 4 });
 *   onEveryDriver("…", () => target, (db) => { …target.admin.query(…)… });
 *
 * The target's fields are filled in by the suite-level hook, so read them in tests and hooks only.
 */
import { neonConfig } from "@neondatabase/serverless";
import { afterAll } from "vitest";
import { type PgProxy, startPgProxy } from "../../tools/bridges/pg-proxy/main";
import type { DriverTarget } from "./db";
import { type PostgresTestOptions, postgresTest } from "./postgres-fixture";

export function proxiedPostgres(options: PostgresTestOptions = {}): DriverTarget {
  const target = {} as DriverTarget;
  let proxy: PgProxy | undefined;
  postgresTest(options).beforeAll(async ({ testDb }) => {
    proxy = await startPgProxy({ databaseUrl: testDb.url });
    Object.assign(target, { admin: testDb.pool, postgresUrl: testDb.url, proxyUrl: proxy.url });
    neonConfig.fetchEndpoint = `${proxy.url}/sql`;
  });
  afterAll(async () => {
    await proxy?.close();
  });
  return target;
}
