/**
 * Per-request access to Postgres (drizzle over Neon HTTP) and Redis (Upstash REST), built lazily
 * so routes that need neither never pay for them. Both handles are per isolate and hold no I/O of
 * their own: `neon()` opens a fetch per query, and the Redis client runs without auto-pipelining,
 * so every command is its own fetch made by the request that issued it (an auto-pipeline shared
 * across requests would settle one request's promise from another request's I/O, which workerd
 * forbids). Building either per request was waste: drizzle's schema walk was ~7% of the
 * gateway's CPU, and an @upstash/redis client defines a closure for every Redis command on
 * construction, ~40% of workerd's CPU samples in a burst of 100 submits (docs/limits.md).
 *
 * `callDependency` turns "the dependency did not answer" into 503 `dependency_unavailable`,
 * while a real query error (a Postgres SQLSTATE outside the connection classes) stays a 500.
 */
import { ApiError } from "../src/contracts/errors";
import { createNeonHttpDb, type NeonHttpDb } from "../src/db/neon-http";
import { createRedisClient, type Redis } from "../src/quota/redis";
import type { GatewayConfig } from "./gateway-config";
import { timed, timedFetch } from "./request-timing";

export interface Deps {
  db(): NeonHttpDb;
  redis(): Redis;
}

let sharedDb: { connectionString: string; fetchEndpoint: string | undefined; db: NeonHttpDb } | null = null;

function isolateDb(connectionString: string, fetchEndpoint: string | undefined): NeonHttpDb {
  if (sharedDb?.connectionString !== connectionString || sharedDb.fetchEndpoint !== fetchEndpoint) {
    sharedDb = {
      connectionString,
      fetchEndpoint,
      db: createNeonHttpDb({ connectionString, fetchEndpoint, fetchFunction: timedFetch("pg") }),
    };
  }
  return sharedDb.db;
}

let sharedRedis: { url: string; token: string; redis: Redis } | null = null;

function isolateRedis(url: string, token: string): Redis {
  if (sharedRedis?.url !== url || sharedRedis.token !== token) {
    sharedRedis = { url, token, redis: createRedisClient({ url, token, autoPipelining: false }) };
  }
  return sharedRedis.redis;
}

export function createDeps(config: GatewayConfig): Deps {
  return {
    db: () => isolateDb(config.databaseUrl, config.neonFetchEndpoint),
    redis: () => isolateRedis(config.redis.url, config.redis.token),
  };
}

export type DependencyName = "postgres" | "redis" | "r2";

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
    return await timed("do", work);
  } catch (err) {
    const e = err as { retryable?: boolean; overloaded?: boolean };
    if (e?.retryable || e?.overloaded) {
      throw new ApiError("dependency_unavailable", "the job's event log is busy; try again shortly", { cause: err });
    }
    throw err;
  }
}
