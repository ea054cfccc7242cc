/**
 * The database type repository functions take. They never build a connection: the gateway
 * passes a drizzle neon-http database, the sandbox-host a drizzle node-postgres one.
 */
import type { PgDatabase, PgQueryResultHKT } from "drizzle-orm/pg-core";
import type * as schema from "./schema";

// biome-ignore lint/suspicious/noExplicitAny: both drivers' result kinds are accepted.
export type Db = PgDatabase<PgQueryResultHKT, typeof schema> | PgDatabase<any, typeof schema>;

/** Both drivers return `{ rows, rowCount }` from `execute`; this reads it without caring which. */
export function resultRows<T>(result: unknown): T[] {
  const r = result as { rows?: T[] } | T[];
  return Array.isArray(r) ? r : (r.rows ?? []);
}

export function resultCount(result: unknown): number {
  const r = result as { rowCount?: number | null; rows?: unknown[] } | unknown[];
  if (Array.isArray(r)) return r.length;
  return r.rowCount ?? r.rows?.length ?? 0;
}
