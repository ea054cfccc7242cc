/**
 * POST /v1/jobs/batch through the real stack (workerd, Postgres, Redis behind the Upstash bridge,
 * a real sandbox-host running the jobs on the mock model): a batch of 100 is created in order and
 * every job completes; a batch with one bad item creates no row at all; two identical keyed
 * batches sent at once make each job once (the loser's statement aborts and answers the winner's
 * jobs). The queued-jobs limit for a batch is in limits.test.ts (its stack has no host, so
 * jobs stay queued). Each test has a tenant of its own, so row counts are the test's.
 */
import { drizzle } from "drizzle-orm/node-postgres";
import type pg from "pg";
import { describe, expect, it } from "vitest";
import { type BatchItem, createJobs } from "../../src/db/jobs-repo";
import * as schema from "../../src/db/schema";
import { createApiKey, createTenant } from "../../src/db/tenants-repo";
import { sleep } from "../../src/domain/async";
import { waitFor } from "../../tools/stack/services/ports";
import type { Stack } from "../../tools/stack/start";
import { apiClient, userMessage } from "../helpers/api";
import { requireBinary } from "../helpers/require";
import { useStack } from "../helpers/stack";

const canRun = await requireBinary("redis-server", "apt-get install redis-server");

interface BatchAnswer {
  jobs: Array<{ id: string; state: string; metadata: Record<string, unknown> }>;
}

describe.skipIf(!canRun)("POST /v1/jobs/batch", () => {
  let stack: Stack;
  let pool: pg.Pool;
  let tenants = 0;

  useStack({ hosts: 1, hostEnv: { HOST_MAX_RUNS: "16" }, mockModel: { ttftMs: 5, tokensPerS: 2000 } }, (s, p) => {
    stack = s;
    pool = p;
  });

  async function newTenant(): Promise<{ tenantId: string; api: ReturnType<typeof apiClient> }> {
    const tenantId = `batch-${++tenants}`;
    const db = drizzle(pool, { schema });
    await createTenant(db, tenantId, tenantId);
    return { tenantId, api: apiClient(stack.gatewayUrl, (await createApiKey(db, tenantId, "batch test")).key) };
  }

  async function rowsOf(tenantId: string): Promise<number> {
    const { rows } = await pool.query<{ n: number }>("SELECT count(*)::int AS n FROM jobs WHERE tenant_id = $1", [
      tenantId,
    ]);
    return rows[0]?.n ?? -1;
  }

  it("a batch of 100 is created in order in one call and every job completes", async () => {
    const { tenantId, api } = await newTenant();
    const items = Array.from({ length: 100 }, (_, i) => ({ ...userMessage(`job ${i}`), metadata: { i } }));
    const res = await api.call<BatchAnswer>("POST", "/v1/jobs/batch", { jobs: items });
    expect(res.status).toBe(202);
    expect(res.body.jobs).toHaveLength(100);
    expect(res.body.jobs.map((j) => j.metadata.i)).toEqual(items.map((_, i) => i));
    expect(new Set(res.body.jobs.map((j) => j.id)).size).toBe(100);
    // Submit order is the batch's order (claims go by created_at).
    const { rows } = await pool.query<{ i: number }>(
      "SELECT (metadata->>'i')::int AS i FROM jobs WHERE tenant_id = $1 ORDER BY created_at, id",
      [tenantId],
    );
    expect(rows.map((r) => r.i)).toEqual(items.map((_, i) => i));
    await waitFor(
      "all 100 batch jobs completed",
      async () => {
        const { rows: states } = await pool.query<{ state: string; n: number }>(
          "SELECT state, count(*)::int AS n FROM jobs WHERE tenant_id = $1 GROUP BY state",
          [tenantId],
        );
        const failed = states.find((s) => s.state === "failed" || s.state === "cancelled");
        if (failed) throw new Error(`${failed.n} jobs ended ${failed.state}`);
        return states.length === 1 && states[0]?.state === "completed" && states[0].n === 100;
      },
      { timeoutMs: 120_000, intervalMs: 250 },
    );
  }, 150_000);

  it("one bad item: 400 naming its index, and no row is created for any item", async () => {
    const { tenantId, api } = await newTenant();
    const items: unknown[] = Array.from({ length: 10 }, (_, i) => userMessage(`ok ${i}`));
    items[7] = { input: { messages: [] } };
    const res = await api.call<{ error: { code: string; message: string } }>("POST", "/v1/jobs/batch", { jobs: items });
    expect(res.status).toBe(400);
    expect(res.body.error.code).toBe("invalid_request");
    expect(res.body.error.message).toMatch(/^jobs\[7\]\.input\.messages: /);
    // An unknown agent is found only by a read: still nothing created.
    const agent = await api.call<{ error: { code: string; message: string } }>("POST", "/v1/jobs/batch", {
      jobs: [userMessage("fine"), { ...userMessage("no such agent"), agent: "nobody" }],
    });
    expect(agent.status).toBe(400);
    expect(agent.body.error.message).toMatch(/^jobs\[1\]\.agent: no agent named "nobody"/);
    expect(await rowsOf(tenantId)).toBe(0);
  });

  it("two identical keyed batches at once create each job once and answer the same jobs", async () => {
    const { tenantId, api } = await newTenant();
    const items = Array.from({ length: 20 }, (_, i) => ({ ...userMessage(`keyed ${i}`), idempotency_key: `k-${i}` }));
    // Plus one unkeyed item per batch: each batch makes its own.
    const body = { jobs: [...items, userMessage("unkeyed")] };
    const [a, b] = await Promise.all([
      api.call<BatchAnswer>("POST", "/v1/jobs/batch", body),
      api.call<BatchAnswer>("POST", "/v1/jobs/batch", body),
    ]);
    expect([a.status, b.status].sort()).toEqual([202, 202]);
    expect(a.body.jobs.slice(0, 20).map((j) => j.id)).toEqual(b.body.jobs.slice(0, 20).map((j) => j.id));
    expect(a.body.jobs[20]?.id).not.toBe(b.body.jobs[20]?.id);
    expect(await rowsOf(tenantId)).toBe(22);
    // A third, later: every keyed item is a replay, the unkeyed one is new (202); keyed only: 200.
    const replay = await api.call<BatchAnswer>("POST", "/v1/jobs/batch", { jobs: items });
    expect(replay.status).toBe(200);
    expect(replay.body.jobs.map((j) => j.id)).toEqual(a.body.jobs.slice(0, 20).map((j) => j.id));
    // The same key with another body refuses the whole batch, naming the item.
    const mismatch = await api.call<{ error: { code: string; message: string } }>("POST", "/v1/jobs/batch", {
      jobs: [userMessage("new one"), { ...userMessage("changed"), idempotency_key: "k-3" }],
    });
    expect(mismatch.status).toBe(409);
    expect(mismatch.body.error).toMatchObject({ code: "idempotency_mismatch" });
    expect(mismatch.body.error.message).toMatch(/^jobs\[1\]\.idempotency_key/);
    expect(await rowsOf(tenantId)).toBe(22);
  });

  it("a key committed between a batch's snapshot and its insert: the statement aborts, retries, and answers that job", async () => {
    const { tenantId } = await newTenant();
    const items = (): BatchItem[] =>
      [0, 1, 2].map((i) => ({
        id: crypto.randomUUID(),
        body: { ...userMessage(`raced ${i}`), idempotency_key: `r-${i}` },
        requestHash: null,
      }));
    // The first batch inserts inside an open transaction, so the second's snapshot cannot see
    // its rows but its INSERT waits on their keys, then skips them when the first commits.
    const client = await pool.connect();
    try {
      await client.query("BEGIN");
      const first = await createJobs(drizzle(client, { schema }), tenantId, items());
      if (!Array.isArray(first)) throw new Error(`first batch refused: ${first.kind}`);
      const second = createJobs(drizzle(pool, { schema }), tenantId, items());
      await sleep(500);
      await client.query("COMMIT");
      const answered = await second;
      if (!Array.isArray(answered)) throw new Error(`second batch refused: ${answered.kind}`);
      expect(answered.map((a) => a.created)).toEqual([false, false, false]);
      expect(answered.map((a) => a.job.id)).toEqual(first.map((f) => f.job.id));
    } finally {
      client.release();
    }
    expect(await rowsOf(tenantId)).toBe(3);
  });
});
