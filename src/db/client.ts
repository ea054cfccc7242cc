/**
 * The database type repository functions take. They never build a connection: the gateway
 * passes a drizzle neon-http database, the sandbox-host a drizzle node-postgres one.
 */

import type { PgDatabase, PgQueryResultHKT } from "drizzle-orm/pg-core";
import { sleep } from "../domain/async";
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

/** Whether the server's error (drivers wrap it: drizzle's DrizzleQueryError keeps it as `cause`) has this SQLSTATE. */
function hasSqlState(err: unknown, code: string): boolean {
  for (let e = err as { code?: unknown; cause?: unknown } | null | undefined, depth = 0; e && depth < 5; depth++) {
    if (e.code === code) return true;
    e = e.cause as typeof e;
  }
  return false;
}

/** SQLSTATE 40P01: Postgres aborted this transaction to break a cycle of lock waits. */
export function isDeadlock(err: unknown): boolean {
  return hasSqlState(err, "40P01");
}

/** SQLSTATE 23505: a unique index refused the row (the claim's key and tenant-slot guards). */
export function isUniqueViolation(err: unknown): boolean {
  return hasSqlState(err, "23505");
}

/**
 * Run a single-statement write again when Postgres aborts it as a deadlock victim. Statements
 * that end many jobs at once fire the child-resume trigger (drizzle/0011) once per child, in row
 * order, and each firing holds its parent's row lock to the commit: two such statements ending
 * children of the same parents in opposite orders can deadlock, and Postgres aborts one of them
 * after deadlock_timeout. The victim rolled back whole (one statement, its own transaction), so
 * running it again is its first attempt once more, re-checking every condition it acts on; the
 * other one always commits, so the cycle does not recur between the same two. Only for a `run`
 * that is one statement outside any transaction: inside one, the abort ends the transaction.
 */
export async function retryOnDeadlock<T>(run: () => Promise<T>, attempts = 5): Promise<T> {
  for (let i = 1; ; i++) {
    try {
      return await run();
    } catch (err) {
      if (i >= attempts || !isDeadlock(err)) throw err;
      // A short random pause before the next try: the statements that deadlocked were started
      // together (group commits of several hosts), and retried at once they meet again in the
      // same order. Measured: 4 hosts × 8 parents, 20 rounds, retried at once, one batch lost
      // all 5 tries (18 deadlocks) once the merged triggers made each statement longer.
      await sleep(Math.random() * 15 * i);
    }
  }
}
