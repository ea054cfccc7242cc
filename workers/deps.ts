/**
 * Per-request access to Postgres (drizzle over Neon HTTP) and Redis (Upstash REST), built lazily
 * so routes that need neither never pay for them. The Redis client is per request, not per
 * isolate: @upstash/redis auto-pipelines, and a pipeline shared across requests would settle one
 * request's promise from another request's I/O, which workerd forbids. The drizzle handle holds
 * no I/O (`neon()` opens a fetch per query), so one per isolate is shared: building it walks the
 * whole schema, measured at ~7% of the gateway's CPU when it was built per request.
 *
 * `callDependency` turns "the dependency did not answer" into 503 `dependency_unavailable`,
 * while a real query error (a Postgres SQLSTATE outside the connection classes) stays a 500.
 */
import { ApiError } from "../src/contracts/errors";
import { createNeonHttpDb, type NeonHttpDb } from "../src/db/neon-http";
import { createRedisClient, type Redis } from "../src/quota/redis";
import type { GatewayConfig } from "./config";

export interface Deps {
  db(): NeonHttpDb;
  redis(): Redis;
}

let sharedDb: { connectionString: string; fetchEndpoint: string | undefined; db: NeonHttpDb } | null = null;

function isolateDb(connectionString: string, fetchEndpoint: string | undefined): NeonHttpDb {
  if (sharedDb?.connectionString !== connectionString || sharedDb.fetchEndpoint !== fetchEndpoint) {
    sharedDb = { connectionString, fetchEndpoint, db: createNeonHttpDb({ connectionString, fetchEndpoint }) };
  }
  return sharedDb.db;
}

export function createDeps(config: GatewayConfig): Deps {
  let redis: Redis | undefined;
  return {
    db: () => isolateDb(config.databaseUrl, config.neonFetchEndpoint),
    redis: () => {
      redis ??= createRedisClient(config.redis);
      return redis;
    },
  };
}

export type DependencyName = "postgres" | "redis";

// One timeout helper for the gateway and the host: src/domain/async.ts.
export { withTimeout } from "../src/domain/async";

/** SQLSTATE classes that mean "could not talk to the database", not "the query is wrong". */
const CONNECTION_SQLSTATE = /^(08|53|57|58)/;

function sqlState(err: unknown): string | undefined {
  for (let e: unknown = err, depth = 0; e && depth < 5; e = (e as { cause?: unknown }).cause, depth++) {
    const code = (e as { code?: unknown }).code;
    if (typeof code === "string" && /^[0-9A-Z]{5}$/.test(code)) return code;
  }
  return undefined;
}

export async function callDependency<T>(name: DependencyName, work: () => Promise<T>): Promise<T> {
  try {
    return await work();
  } catch (err) {
    if (err instanceof ApiError) throw err;
    const state = sqlState(err);
    if (name === "postgres" && state && !CONNECTION_SQLSTATE.test(state)) throw err;
    throw new ApiError("dependency_unavailable", `${name} is unavailable; try again shortly`, { cause: err });
  }
}

/** Durable Object calls fail with `retryable`/`overloaded` set when the object was reset or is busy. */
export async function callDurableObject<T>(work: () => Promise<T>): Promise<T> {
  try {
    return await work();
  } catch (err) {
    const e = err as { retryable?: boolean; overloaded?: boolean };
    if (e?.retryable || e?.overloaded) {
      throw new ApiError("dependency_unavailable", "the job's event log is busy; try again shortly", { cause: err });
    }
    throw err;
  }
}
