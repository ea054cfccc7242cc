/**
 * The gateway's database: drizzle over Neon's SQL-over-HTTP (`neon()`), one fetch per query, so
 * a Worker needs no socket and no pool per request. In production `fetchEndpoint` is unset and
 * the driver derives Neon's endpoint from the connection string's host; locally it points at the
 * `/sql` endpoint of tools/bridges/pg-proxy/main.ts.
 */
import { neon, neonConfig } from "@neondatabase/serverless";
import { drizzle } from "drizzle-orm/neon-http";
import * as schema from "./schema";

export interface NeonHttpOptions {
  connectionString: string;
  /** e.g. "http://127.0.0.1:5480/sql" for the local proxy. */
  fetchEndpoint?: string;
  /** The fetch the driver sends queries with (the gateway's times each as its request's `pg`). */
  fetchFunction?: typeof fetch;
}

export function createNeonHttpDb({ connectionString, fetchEndpoint, fetchFunction }: NeonHttpOptions) {
  // neonConfig's fields are global to the isolate; one deployment talks to one database, so
  // setting them on every call is idempotent.
  if (fetchEndpoint) neonConfig.fetchEndpoint = fetchEndpoint;
  if (fetchFunction) neonConfig.fetchFunction = fetchFunction;
  return drizzle({ client: neon(connectionString), schema });
}

export type NeonHttpDb = ReturnType<typeof createNeonHttpDb>;
