/**
 * A whole local stack (tools/stack/start.ts) for one describe block, plus a small admin pool on its
 * database: started before the block's tests, stopped after them. Read them through the returned
 * handle (`t.stack`, `t.pool`) or have `ready` hand them to the block's own variables.
 */
import type pg from "pg";
import { afterAll, beforeAll } from "vitest";
import { type Stack, type StackOptions, startStack } from "../../tools/stack/start";
import { testPool } from "./db";

/**
 * Hosts that declare a silent run lost within ~4 s (heartbeats every 1 s, reaper every 200 ms).
 * The heartbeat also paces quota leases (3 × heartbeat = 3 s here). Not faster: at 300 ms
 * heartbeats (900 ms leases) a loaded CI machine's Redis round trips (1.1–1.5 s measured at load
 * 13) outlasted leases, and runs failed quota_lease_lost. Use it only where a test needs a run
 * declared lost quickly.
 */
export const FAST_LOSS_HOST_ENV = { HOST_HEARTBEAT_MS: "1000", HOST_RUN_LOST_AFTER_MS: "4000", HOST_REAP_MS: "200" };

/** A part of a stack a describe block starts in beforeAll: there once started, else a clear error. */
export function started<T>(value: T | undefined): T {
  if (value === undefined) throw new Error("the stack is not started yet (read it inside a test or hook)");
  return value;
}

export interface StackHandle {
  readonly stack: Stack;
  readonly pool: pg.Pool;
}

export function useStack(opts: StackOptions, ready?: (stack: Stack, pool: pg.Pool) => void): StackHandle {
  let stack: Stack | undefined;
  let pool: pg.Pool | undefined;
  beforeAll(async () => {
    stack = await startStack(opts);
    pool = testPool(stack.databaseUrl, 2);
    ready?.(stack, pool);
  }, 180_000);
  afterAll(async () => {
    await pool?.end();
    await stack?.stop();
  }, 60_000);
  return {
    get stack() {
      return started(stack);
    },
    get pool() {
      return started(pool);
    },
  };
}
