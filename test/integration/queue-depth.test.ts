/**
 * The autoscaling signal against a real Postgres: the grouped statement counts exactly the jobs
 * waiting for a slot (queued, unclaimed) per tenant with the oldest one's age, its plan walks a
 * partial index rather than the whole job history (its measured time is printed), and the
 * sampler exports the global gauges plus capped per-tenant series that vanish when a tenant's
 * queue drains.
 */
import { sql } from "drizzle-orm";
import { Registry } from "prom-client";
import { describe, expect, it } from "vitest";
import { silentLogger } from "../../sandbox-host/log";
import { QueueDepthSampler, TENANT_SERIES } from "../../sandbox-host/metrics/queue-depth";
import { resultRows } from "../../src/db/client";
import { QUEUE_DEPTH_SQL, queueDepthByTenant } from "../../src/db/queue-depth-repo";
import { waitFor } from "../../tools/stack/services/ports";
import type { TestDb } from "../helpers/db";
import { postgresTest } from "../helpers/postgres-fixture";

const TENANTS = 50;
const FINISHED = 200_000;
const CLAIMED = 500;
/** Tenant i (1-based) has 4·i waiting jobs, the oldest of them i minutes old: 5,100 in all. */
const waitingOf = (i: number) => 4 * i;
const TOTAL_WAITING = Array.from({ length: TENANTS }, (_, k) => waitingOf(k + 1)).reduce((a, b) => a + b, 0);

const test = postgresTest({ connections: 4 });
let t: TestDb;

test.beforeAll(async ({ testDb }) => {
  t = testDb;
  await t.pool.query(
    `insert into tenants (id, name) select 'qd-' || i, 'tenant ' || i from generate_series(1, ${TENANTS}) i`,
  );
  // History: finished jobs spread over every tenant, the bulk of a real table.
  await t.pool.query(`
    insert into jobs (id, tenant_id, state, created_at, finished_at, input)
    select gen_random_uuid(), 'qd-' || (1 + n % ${TENANTS}), 'completed',
           now() - interval '1 day' + n * interval '1 ms', now(), '{"messages":[]}'
      from generate_series(1, ${FINISHED}) n`);
  // Claimed but not started: queued with an owner, not waiting for a slot.
  await t.pool.query(`
    insert into jobs (id, tenant_id, state, owner, claimed_at, created_at, input)
    select gen_random_uuid(), 'qd-' || (1 + n % ${TENANTS}), 'queued', 'some-host', now(),
           now() - interval '2 hours', '{"messages":[]}'
      from generate_series(1, ${CLAIMED}) n`);
  // Waiting: tenant i has 4·i jobs; its oldest is i minutes old, the rest newer.
  await t.pool.query(`
    insert into jobs (id, tenant_id, state, created_at, input)
    select gen_random_uuid(), 'qd-' || i, 'queued',
           now() - i * interval '1 minute' + (k - 1) * interval '1 ms', '{"messages":[]}'
      from generate_series(1, ${TENANTS}) i, generate_series(1, 4 * i) k`);
  await t.pool.query("analyze jobs");
}, 120_000);

describe("queue depth", () => {
  it("counts the waiting jobs per tenant with the oldest one's age, and nothing claimed or finished", async () => {
    const rows = await queueDepthByTenant(t.db);
    expect(rows).toHaveLength(TENANTS);
    for (const r of rows) {
      const i = Number(r.tenantId.slice(3));
      expect(r.waiting, r.tenantId).toBe(waitingOf(i));
      // i minutes, plus the seconds this test has taken so far.
      expect(r.oldestAgeSeconds, r.tenantId).toBeGreaterThanOrEqual(i * 60);
      expect(r.oldestAgeSeconds, r.tenantId).toBeLessThan(i * 60 + 120);
    }
  });

  it("walks a partial index of the queued jobs, not the history (plan and measured time printed)", async () => {
    const timings: number[] = [];
    let plan: { Plan: Record<string, unknown>; "Execution Time": number } | undefined;
    for (let k = 0; k < 5; k++) {
      const result = await t.db.execute(sql`explain (analyze, buffers, format json) ${QUEUE_DEPTH_SQL}`);
      const [row] = resultRows<{ "QUERY PLAN": Array<typeof plan> }>(result);
      plan = row!["QUERY PLAN"][0];
      timings.push(plan!["Execution Time"]);
    }
    const text = JSON.stringify(plan!.Plan);
    const scans = [...text.matchAll(/"Node Type":"([^"]+)"/g)].map((m) => m[1]);
    const indexes = [...text.matchAll(/"Index Name":"([^"]+)"/g)].map((m) => m[1]);
    console.log(
      `queue-depth statement over ${FINISHED} finished + ${CLAIMED} claimed + ${TOTAL_WAITING} waiting jobs: ` +
        `execution ${timings.map((ms) => ms.toFixed(2)).join(", ")} ms; nodes ${scans.join(" > ")}; indexes ${indexes.join(", ")}`,
    );
    expect(scans).not.toContain("Seq Scan");
    expect(indexes.some((name) => name === "jobs_ready_idx" || name === "jobs_admission_idx")).toBe(true);
    // Loose bound (2 shared cores under other suites): the point is not reading 200,000 rows.
    expect(Math.min(...timings)).toBeLessThan(50);
  });

  it("the sampler exports the totals and the busiest tenants, and a drained tenant's series vanishes", async () => {
    const registry = new Registry();
    const sampler = new QueueDepthSampler({ db: t.db, registry, intervalMs: 60_000, log: silentLogger });
    sampler.start();
    try {
      const g = sampler.gauges;
      const total = () => g.waiting.get().then((m) => m.values[0]?.value ?? 0);
      await waitFor("the first sample at start", async () => ((await total()) > 0 ? true : null), {
        timeoutMs: 10_000,
        intervalMs: 20,
      });
      expect(await total()).toBe(TOTAL_WAITING);
      expect((await g.oldestAge.get()).values[0]!.value).toBeGreaterThanOrEqual(TENANTS * 60);
      const byTenant = (await g.waitingByTenant.get()).values;
      expect(byTenant).toHaveLength(TENANT_SERIES);
      expect(new Set(byTenant.map((v) => v.labels.tenant))).toEqual(
        new Set(Array.from({ length: TENANT_SERIES }, (_, k) => `qd-${TENANTS - k}`)),
      );

      // The busiest tenant's queue drains: its series goes, the next tenant takes the last slot.
      await t.pool.query(`update jobs set state = 'cancelled', finished_at = now() where tenant_id = 'qd-${TENANTS}'`);
      await sampler.sample();
      const after = (await g.waitingByTenant.get()).values.map((v) => v.labels.tenant);
      expect(after).not.toContain(`qd-${TENANTS}`);
      expect(after).toContain(`qd-${TENANTS - TENANT_SERIES}`);
      expect(await total()).toBe(TOTAL_WAITING - waitingOf(TENANTS));
      expect((await g.errors.get()).values[0]!.value).toBe(0);
    } finally {
      await sampler.stop();
    }
  });
});
