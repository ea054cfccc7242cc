/**
 * A whole local stack (tools/stack.ts) for one describe block, plus a small admin pool on its
 * database: started before the block's tests, stopped after them. `ready` hands both to the
 * block's own variables, so tests keep writing `stack.gatewayUrl` and `pool.query(…)`.
 */
import type pg from "pg";
import { afterAll, beforeAll } from "vitest";
import { type Stack, type StackOptions, startStack } from "../../tools/stack";
import { testPool } from "./db";

export function useStack(opts: StackOptions, ready: (stack: Stack, pool: pg.Pool) => void): void {
  let stack: Stack | undefined;
  let pool: pg.Pool | undefined;
  beforeAll(async () => {
    stack = await startStack(opts);
    pool = testPool(stack.databaseUrl, 2);
    ready(stack, pool);
  }, 180_000);
  afterAll(async () => {
    await pool?.end();
    await stack?.stop();
  }, 60_000);
}
