/**
 * The host's named prepared statements (sandbox-host/prepared-statements.ts) against real
 * Postgres: the lifecycle statements are prepared once per connection under their names and
 * keep every fence; nothing else is named.
 */
import { randomUUID } from "node:crypto";
import { drizzle } from "drizzle-orm/node-postgres";
import pg from "pg";
import { expect, it } from "vitest";
import { nameLifecycleStatements } from "../../sandbox-host/prepared-statements";
import { getJob } from "../../src/db/jobs-repo";
import { claimFromPostgres, finishJobsMany, heartbeat, markStartedMany } from "../../src/db/ownership-repo";
import * as schema from "../../src/db/schema";
import { jobs, tenants } from "../../src/db/schema";
import { classifyChunk } from "../../tools/chaos/pg-chaos-proxy";
import { claimJobs } from "../../tools/lib/single-row-writes";
import type { TestDb } from "../helpers/db";
import { postgresTest } from "../helpers/postgres-fixture";

const test = postgresTest({ connections: 2, tenants: ["t1"] });
let t: TestDb;

test.beforeAll(({ testDb }) => {
  t = testDb;
});

it("prepares the lifecycle statements once per connection by name, keeps their fences, names nothing else", async () => {
  const pool = new pg.Pool({ connectionString: t.url, max: 1 });
  nameLifecycleStatements(pool);
  const db = drizzle(pool, { schema });
  try {
    for (let round = 0; round < 3; round++) {
      const [a, b] = [randomUUID(), randomUUID()];
      await t.db.insert(jobs).values([a, b].map((id) => ({ id, tenantId: "t1", input: { messages: [] } })));
      const polled = await claimFromPostgres(db, "H", [randomUUID()]);
      const [ready] = [...(await claimJobs(db, "H", [{ jobId: b, token: randomUUID() }])).entries()];
      expect(polled).toHaveLength(1);
      expect(ready?.[0]).toBe(b);
      const row = await getJob(db, "t1", b); // not a lifecycle statement: must stay unnamed
      const ids = [
        { ...(polled[0] as (typeof polled)[number]), host: "H", executionId: randomUUID() },
        { jobId: b, epoch: ready?.[1] as number, token: row?.token as string, host: "H", executionId: randomUUID() },
      ];
      // The same batch with one stale epoch: the named statement still checks every row.
      const started = await markStartedMany(db, [ids[0]!, { ...ids[1]!, epoch: 99 }]);
      expect([...started]).toEqual([ids[0]?.executionId]);
      expect(await markStartedMany(db, [ids[1]!])).toEqual(new Set([ids[1]?.executionId]));
      expect(await heartbeat(db, [...ids, { ...ids[0]!, token: randomUUID() }])).toEqual(
        new Set(ids.map((i) => i.executionId)),
      );
      const done = await finishJobsMany(db, [
        { id: ids[0]!, outcome: { state: "completed", output: `r${round}` } },
        { id: { ...ids[1]!, executionId: randomUUID() }, outcome: { state: "completed", output: "stale" } },
      ]);
      expect(done.map((d) => d.written)).toEqual([true, false]);
    }
    const prepared = await pool.query(
      "SELECT name, from_sql, generic_plans + custom_plans AS plans FROM pg_prepared_statements ORDER BY name",
    );
    expect(prepared.rows.map((r) => r.name)).toEqual([
      "ear_claim_poll_1",
      "ear_claim_ready",
      "ear_finish",
      "ear_heartbeat",
      "ear_start",
    ]);
    expect(prepared.rows.every((r) => r.from_sql === false)).toBe(true);
    const plans = Object.fromEntries(prepared.rows.map((r) => [r.name, Number(r.plans)]));
    expect(plans.ear_start).toBe(6);
    expect(plans.ear_finish).toBe(3);
  } finally {
    await pool.end();
  }
});

it("plans the admission claim once: after the planner's five custom plans, every claim runs the cached generic plan", async () => {
  // Re-planning it on every execution was most of its cost (docs/claims.md, "Cost of the claim
  // statement"): with its LIMITs sent as parameters the generic plan never won the cost test.
  await t.db.insert(tenants).values({ id: "t2", name: "t2" });
  await t.db.insert(jobs).values(
    Array.from({ length: 24 }, (_, i) => ({
      id: randomUUID(),
      tenantId: i % 2 ? "t1" : "t2",
      input: { messages: [] },
    })),
  );
  const pool = new pg.Pool({ connectionString: t.url, max: 1 });
  nameLifecycleStatements(pool);
  const db = drizzle(pool, { schema });
  try {
    let claimed = 0;
    for (let i = 0; i < 10; i++) claimed += (await claimFromPostgres(db, "G", [randomUUID(), randomUUID()])).length;
    expect(claimed).toBe(20);
    const r = await pool.query(
      "SELECT name, generic_plans::int AS generic, custom_plans::int AS custom FROM pg_prepared_statements",
    );
    expect(r.rows).toEqual([{ name: "ear_claim_poll_2", generic: 5, custom: 5 }]);
  } finally {
    await pool.end();
  }
});

test("plans the claim with a newcomer reserve once too, at 1,000 tenants and 4,000 queued jobs", async ({
  postgres,
}) => {
  // Its own name (the reserve is part of the text). A first version counted the reserve with a
  // window over every ranked row: at this size Postgres re-planned it on every execution.
  const big = await postgres.freshDb(2);
  await big.pool.query("INSERT INTO tenants (id, name) SELECT 'r-' || i, 'r' FROM generate_series(1, 1000) i");
  await big.pool.query(
    `INSERT INTO jobs (id, tenant_id, input, created_at)
     SELECT gen_random_uuid(), 'r-' || (1 + i % 1000), '{"messages":[]}', now() - interval '1 hour' + i * interval '1 ms'
     FROM generate_series(0, 3999) i`,
  );
  // 64 of them hold a job on another host, as in bench:claims --admission.
  await big.pool.query(
    `UPDATE jobs SET owner = 'elsewhere', claimed_at = now()
     WHERE id IN (SELECT DISTINCT ON (tenant_id) id FROM jobs WHERE tenant_id IN (SELECT 'r-' || i FROM generate_series(1, 64) i))`,
  );
  await big.pool.query("VACUUM ANALYZE jobs");
  await big.pool.query("VACUUM ANALYZE tenants");
  const pool = new pg.Pool({ connectionString: big.url, max: 1 });
  nameLifecycleStatements(pool);
  const client = await pool.connect();
  const db = drizzle(client, { schema });
  try {
    for (let i = 0; i < 10; i++) {
      await client.query("BEGIN");
      const claims = await claimFromPostgres(db, "G", Array.from({ length: 8 }, randomUUID), 0, 1);
      await client.query("ROLLBACK");
      expect(claims).toHaveLength(8);
    }
    const r = await client.query(
      "SELECT name, generic_plans::int AS generic, custom_plans::int AS custom FROM pg_prepared_statements",
    );
    expect(r.rows).toEqual([{ name: "ear_claim_poll_8_r1", generic: 5, custom: 5 }]);
  } finally {
    client.release();
    await pool.end();
  }
}, 60_000);

it("the chaos proxy still recognises a named claim and start by the name in each Bind", () => {
  // Bind: 'B', length, portal "", statement name, … (what node-postgres sends once it is parsed).
  const bind = (name: string) => Buffer.concat([Buffer.from("B\0\0\0\x20\0", "latin1"), Buffer.from(`${name}\0`)]);
  expect(classifyChunk(bind("ear_claim_poll"))).toBe("claim");
  expect(classifyChunk(bind("ear_claim_ready"))).toBe("claim");
  expect(classifyChunk(bind("ear_start"))).toBe("start");
  expect(classifyChunk(bind("ear_finish"))).toBe("other");
  expect(classifyChunk(bind("ear_heartbeat"))).toBe("other");
});
