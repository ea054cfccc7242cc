/**
 * GET /v1/usage's spend and health (src/db/usage-repo.ts usageHealth) on a real Postgres: jobs and
 * model calls seeded with known times, states, errors, agents and costs, and the answer's budget,
 * spend per day/agent/model, jobs per hour by state, latency percentiles and top error codes
 * checked against them; another tenant's rows and days outside the range count for nothing.
 */
import { randomUUID } from "node:crypto";
import { eq } from "drizzle-orm";
import { describe, expect, it } from "vitest";
import { UsageAnswerSchema } from "../../src/contracts/catalog";
import { jobs, modelUsage, tenants } from "../../src/db/schema";
import { usageByDay, usageHealth } from "../../src/db/usage-repo";
import type { TestDb } from "../helpers/db";
import { postgresTest } from "../helpers/postgres-fixture";

const test = postgresTest({ connections: 4, tenants: ["u1", "u2"] });
let t: TestDb;
test.beforeAll(({ testDb }) => {
  t = testDb;
});

const at = (iso: string, plusMs = 0) => new Date(Date.parse(iso) + plusMs);

async function job(
  tenant: string,
  created: string,
  opts: {
    state?: "queued" | "completed" | "failed" | "cancelled";
    agent?: string;
    dispatchMs?: number;
    firstMs?: number;
    totalMs?: number;
    error?: string;
  } = {},
): Promise<string> {
  const id = randomUUID();
  await t.db.insert(jobs).values({
    id,
    tenantId: tenant,
    input: { messages: [{ role: "user", content: "x" }] },
    state: opts.state ?? "completed",
    agentName: opts.agent ?? null,
    agentVersion: opts.agent ? 1 : null,
    createdAt: at(created),
    startedAt: opts.dispatchMs === undefined ? null : at(created, opts.dispatchMs),
    firstOutputAt: opts.firstMs === undefined ? null : at(created, opts.firstMs),
    finishedAt: opts.totalMs === undefined ? null : at(created, opts.totalMs),
    error: opts.error ? { code: opts.error, message: "m" } : null,
  } as typeof jobs.$inferInsert);
  return id;
}

async function call(tenant: string, jobId: string, when: string, model: string, cost: number | null) {
  await t.db.insert(modelUsage).values({
    tenantId: tenant,
    jobId,
    executionId: randomUUID(),
    model,
    promptTokens: 10,
    completionTokens: 5,
    costUsd: cost,
    createdAt: at(when),
  });
}

describe("GET /v1/usage: spend and health", () => {
  it("sums spend per day, agent and model, counts jobs per hour by state, and reports latency percentiles and top errors", async () => {
    await t.db.update(tenants).set({ dailyBudgetUsd: 2.5 }).where(eq(tenants.id, "u1"));
    // Ten completed jobs at 13:xx on 2026-03-01 with dispatch 10..100 ms, first output 2x, total 10x.
    const done: string[] = [];
    for (let i = 1; i <= 10; i++) {
      done.push(
        await job("u1", `2026-03-01T13:0${i % 10}:00Z`, {
          agent: i <= 4 ? "writer" : undefined,
          dispatchMs: i * 10,
          firstMs: i * 20,
          totalMs: i * 100,
        }),
      );
    }
    await job("u1", "2026-03-01T14:10:00Z", { state: "failed", dispatchMs: 5, totalMs: 50, error: "provider_error" });
    await job("u1", "2026-03-01T14:20:00Z", { state: "failed", dispatchMs: 5, totalMs: 60, error: "provider_error" });
    await job("u1", "2026-03-02T09:00:00Z", { state: "failed", dispatchMs: 5, totalMs: 70, error: "timeout" });
    await job("u1", "2026-03-02T09:30:00Z", { state: "queued" });
    // Outside the range, and another tenant's: neither counts.
    await job("u1", "2026-03-03T00:00:00Z", { state: "failed", error: "internal_error" });
    const other = await job("u2", "2026-03-01T13:00:00Z", { state: "failed", error: "internal_error", totalMs: 9 });
    await call("u1", done[0] as string, "2026-03-01T13:01:00Z", "m-a", 0.25);
    await call("u1", done[1] as string, "2026-03-01T13:02:00Z", "m-a", 0.5);
    await call("u1", done[5] as string, "2026-03-01T13:06:00Z", "m-a", 1);
    await call("u1", done[6] as string, "2026-03-02T13:06:00Z", "m-b", null);
    await call("u2", other, "2026-03-01T13:00:00Z", "m-a", 99);

    const h = await usageHealth(t.db, "u1", "2026-03-01", "2026-03-02");
    const answer = UsageAnswerSchema.parse({
      from: "2026-03-01",
      to: "2026-03-02",
      usage: await usageByDay(t.db, "u1", "2026-03-01", "2026-03-02"),
      ...h,
    });
    expect(answer.daily_budget_usd).toBe(2.5);
    expect(answer.spend).toEqual([
      { day: "2026-03-01", agent: null, model: "m-a", model_calls: 1, cost_usd: 1 },
      { day: "2026-03-01", agent: "writer", model: "m-a", model_calls: 2, cost_usd: 0.75 },
      { day: "2026-03-02", agent: null, model: "m-b", model_calls: 1, cost_usd: null },
    ]);
    expect(answer.jobs_per_hour).toEqual([
      { hour: "2026-03-01T13:00:00Z", state: "completed", jobs: 10 },
      { hour: "2026-03-01T14:00:00Z", state: "failed", jobs: 2 },
      { hour: "2026-03-02T09:00:00Z", state: "failed", jobs: 1 },
      { hour: "2026-03-02T09:00:00Z", state: "queued", jobs: 1 },
    ]);
    // 13 jobs started: dispatch 5, 5, 5, 10, 20, …, 100 ms. percentile_disc: the value at rank ceil(p × n), a job's own.
    expect(answer.latency.dispatch_ms).toEqual({ jobs: 13, p50: 40, p95: 100, p99: 100 });
    expect(answer.latency.first_output_ms).toEqual({ jobs: 10, p50: 100, p95: 200, p99: 200 });
    // Totals: 50, 60, 70, 100, 200, …, 1000.
    expect(answer.latency.total_ms).toEqual({ jobs: 13, p50: 400, p95: 1000, p99: 1000 });
    expect(answer.errors).toEqual([
      { code: "provider_error", jobs: 2 },
      { code: "timeout", jobs: 1 },
    ]);

    const empty = await usageHealth(t.db, "u1", "2025-01-01", "2025-01-02");
    expect(empty).toEqual({
      daily_budget_usd: 2.5,
      spend: [],
      jobs_per_hour: [],
      latency: {
        dispatch_ms: { jobs: 0, p50: null, p95: null, p99: null },
        first_output_ms: { jobs: 0, p50: null, p95: null, p99: null },
        total_ms: { jobs: 0, p50: null, p95: null, p99: null },
      },
      errors: [],
    });
  });
});
