/**
 * The claim statement's admission order on a real Postgres (src/db/ownership-repo.ts
 * claimFromPostgres): weighted round-robin across tenants, priority then submit order inside a
 * tenant, run_at, expiry, a tenant's max_running and concurrency keys, also under claimers racing
 * on separate connections. It is the one statement every host path claims with (index, NOTIFY,
 * sweep, Redis down), so these hold for the Postgres fallback as much as for the index path.
 * Each case runs twice: unnamed statements (custom plans, as through a pooler) and named ones
 * held to their generic plan (a host on a direct connection runs the cached generic plan after
 * five executions: docs/claims.md "Cost of the claim statement").
 */
import { randomUUID } from "node:crypto";
import { drizzle } from "drizzle-orm/node-postgres";
import pgClient from "pg";
import { afterEach, beforeEach, describe, expect } from "vitest";
import { nameLifecycleStatements } from "../../sandbox-host/prepared-statements";
import type { CreateJobBody } from "../../src/contracts/job";
import { expireOverdue } from "../../src/db/admission-repo";
import type { Db } from "../../src/db/client";
import { createJob } from "../../src/db/jobs-repo";
import { claimFromPostgres } from "../../src/db/ownership-repo";
import * as schema from "../../src/db/schema";
import { createTenant, setTenantSettings } from "../../src/db/tenants-repo";
import type { TestDb } from "../helpers/db";
import { postgresTest } from "../helpers/postgres-fixture";

const test = postgresTest({ connections: 12 });
/** This case's own database: the cases reuse tenant names and count every claimed row. */
let t: TestDb;
const db = () => t.db as unknown as Db;
/** What the claims go through: `db()`, or a named pool whose plans are generic from the first. */
let claimDb: () => Db = db;
let namedPool: pgClient.Pool | null = null;

test.beforeEach(({ caseDb }) => {
  t = caseDb;
});
afterEach(async () => {
  await namedPool?.end();
  namedPool = null;
});

/** Runs the cases below with claims sent as `plans` says. */
function claimsAs(plans: "custom" | "generic") {
  beforeEach(() => {
    if (plans === "custom") {
      claimDb = db;
      return;
    }
    const pool = new pgClient.Pool({
      connectionString: t.url,
      max: 12,
      options: "-c plan_cache_mode=force_generic_plan",
    });
    nameLifecycleStatements(pool);
    namedPool = pool;
    const named = drizzle(pool, { schema }) as unknown as Db;
    claimDb = () => named;
  });
}

const body = (extra: Partial<CreateJobBody> = {}, label = "j"): CreateJobBody => ({
  input: { messages: [{ role: "user", content: label }] },
  ...extra,
});

/** `n` jobs of `tenant`, in submit order (each its own statement, so created_at increases). */
async function submit(tenant: string, n: number, extra: Partial<CreateJobBody> = {}): Promise<string[]> {
  const ids: string[] = [];
  for (let i = 0; i < n; i++) {
    const c = await createJob(db(), tenant, randomUUID(), body(extra, `${tenant}-${i}`));
    ids.push(c.job.id);
  }
  return ids;
}

const claim = (n: number, host = "h1", reserved = 0) =>
  claimFromPostgres(
    claimDb(),
    host,
    Array.from({ length: n }, () => randomUUID()),
    0,
    reserved,
  );

async function tenantsOf(jobIds: string[]): Promise<string[]> {
  if (jobIds.length === 0) return [];
  const r = await t.pool.query<{ tenant_id: string }>(
    "SELECT tenant_id FROM jobs WHERE id = ANY($1::uuid[]) ORDER BY tenant_id",
    [jobIds],
  );
  return r.rows.map((x) => x.tenant_id);
}

/** Ends a held job as its host would (only the state matters to admission). */
const finish = (id: string) =>
  t.pool.query("UPDATE jobs SET state = 'completed', finished_at = now() WHERE id = $1", [id]);

describe.each(["custom", "generic"] as const)("admission order of the claim statement (%s plans)", (plans) => {
  claimsAs(plans);
  test("shares slots round-robin by weight among tenants with runnable work, whatever came first", async () => {
    await createTenant(db(), "big");
    await createTenant(db(), "small");
    await createTenant(db(), "heavy");
    await setTenantSettings(db(), "heavy", { weight: 3 });
    // `big` queued first and most: first-come would give it every slot.
    await submit("big", 20);
    await submit("small", 3);
    await submit("heavy", 20);
    const first = await claim(10);
    const counts = (await tenantsOf(first.map((c) => c.jobId))).reduce<Record<string, number>>((m, x) => {
      m[x] = (m[x] ?? 0) + 1;
      return m;
    }, {});
    // Ranks (held + k) / weight: big 1,2,3…; small 1,2,3; heavy 1/3,2/3,1,4/3,… → 10 slots:
    // heavy 6 (≤ 2), big 2, small 2 (ties broken by submit order).
    expect(counts).toEqual({ heavy: 6, big: 2, small: 2 });
    // What they hold now counts: the next pass evens out from there, not from zero.
    // held heavy 6, big 2, small 2 → heavy 7/3, 8/3, then big 3, small 3, heavy 9/3 (submit order).
    const second = await claim(5);
    expect(await tenantsOf(second.map((c) => c.jobId))).toEqual(["big", "heavy", "heavy", "heavy", "small"]);
  });

  test("inside a tenant: priority first, then submit order", async () => {
    await createTenant(db(), "a");
    const low = await submit("a", 3);
    const [high] = await submit("a", 1, { priority: 10 });
    const [neg] = await submit("a", 1, { priority: -5 });
    const order: string[] = [];
    for (let i = 0; i < 5; i++) order.push(...(await claim(1)).map((c) => c.jobId));
    expect(order).toEqual([high, ...low, neg]);
  });

  test("a job waits for its run_at, and one past its ttl is never claimed but ends expired", async () => {
    await createTenant(db(), "a");
    const [later] = await submit("a", 1, { delay_s: 3600 });
    const [atSoon] = await submit("a", 1, { run_at: new Date(Date.now() + 1500).toISOString() });
    const [short] = await submit("a", 1, { ttl_s: 1 });
    // Make the ttl job overdue without waiting (its expires_at is Postgres' now() + 1 s).
    await t.pool.query("UPDATE jobs SET expires_at = now() - interval '1 second' WHERE id = $1", [short]);
    expect(await claim(8)).toEqual([]);
    expect(await expireOverdue(db())).toEqual([short]);
    const row = (
      await t.pool.query<{ state: string; error: { code: string }; started_at: Date | null; owner: string | null }>(
        "SELECT state, error, started_at, owner FROM jobs WHERE id = $1",
        [short],
      )
    ).rows[0];
    expect(row).toMatchObject({ state: "expired", error: { code: "expired" }, started_at: null, owner: null });
    expect(await expireOverdue(db())).toEqual([]);
    await new Promise((r) => setTimeout(r, 1600));
    expect((await claim(8)).map((c) => c.jobId)).toEqual([atSoon]);
    // A job that started once and is queued again (resumed after a wait) is past its ttl but
    // still claimable: its ttl was about the first start, and the sweep leaves it alone.
    const [resumed] = await submit("a", 1, { ttl_s: 1 });
    await t.pool.query(
      "UPDATE jobs SET started_at = now() - interval '5 seconds', expires_at = now() - interval '1 second' WHERE id = $1",
      [resumed],
    );
    expect(await expireOverdue(db())).toEqual([]);
    expect((await claim(8)).map((c) => c.jobId)).toEqual([resumed]);
    const runAt = (
      await t.pool.query<{ d: number }>("SELECT extract(epoch FROM run_at - created_at) AS d FROM jobs WHERE id = $1", [
        later,
      ])
    ).rows[0];
    expect(Number(runAt?.d)).toBeCloseTo(3600, 0);
  });

  test("max_running caps what a tenant holds, and a freed slot is taken again", async () => {
    await createTenant(db(), "capped");
    await createTenant(db(), "free");
    await setTenantSettings(db(), "capped", { maxRunning: 2 });
    await submit("capped", 6);
    await submit("free", 1);
    const first = await claim(8);
    expect(await tenantsOf(first.map((c) => c.jobId))).toEqual(["capped", "capped", "free"]);
    expect(await claim(8)).toEqual([]);
    const [held] = (
      await t.pool.query<{ id: string }>("SELECT id FROM jobs WHERE tenant_id = 'capped' AND owner IS NOT NULL LIMIT 1")
    ).rows;
    await finish(held?.id as string);
    expect(await tenantsOf((await claim(8)).map((c) => c.jobId))).toEqual(["capped"]);
  });

  test("reserved slots go only to a newcomer's first job; the others take at most B − reserve", async () => {
    await createTenant(db(), "long");
    await submit("long", 10);
    // Alone, `long` takes 3 of 4 free slots and never the reserved one.
    expect(await tenantsOf((await claim(4, "h1", 1)).map((c) => c.jobId))).toEqual(["long", "long", "long"]);
    expect(await claim(1, "h1", 1)).toEqual([]);
    // A tenant holding nothing gets its first job in the reserve, not its second.
    await createTenant(db(), "newcomer");
    const fresh = await submit("newcomer", 3);
    expect((await claim(1, "h1", 1)).map((c) => c.jobId)).toEqual([fresh[0]]);
    expect(await claim(1, "h1", 1)).toEqual([]);
    // Slots beyond the reserve go round-robin as before: newcomer holds 1, long 3.
    expect((await claim(3, "h1", 1)).map((c) => c.jobId).sort()).toEqual([fresh[1], fresh[2]].sort());
    // Two newcomers arriving together both start when 2 slots are free with 1 reserved: each
    // first job may take a reserved slot or an open one.
    await createTenant(db(), "n2");
    await createTenant(db(), "n3");
    await submit("n2", 2);
    await submit("n3", 2);
    expect(await tenantsOf((await claim(2, "h1", 1)).map((c) => c.jobId))).toEqual(["n2", "n3"]);
  });

  test("a reserved slot reaches a newcomer even when tenants that hold jobs rank earlier by weight", async () => {
    // `heavy` (weight 3) holding 1 ranks its next job at 2/3, before a newcomer's 1/1: the walk
    // over the first B tenants must still reach the newcomer, or the reserved slot stays empty.
    await createTenant(db(), "heavy");
    await setTenantSettings(db(), "heavy", { weight: 3 });
    await submit("heavy", 5);
    expect(await tenantsOf((await claim(1)).map((c) => c.jobId))).toEqual(["heavy"]);
    await createTenant(db(), "newcomer");
    const [fresh] = await submit("newcomer", 1);
    expect((await claim(1, "h1", 1)).map((c) => c.jobId)).toEqual([fresh]);
  });

  test("a concurrency key holds one job at a time, in priority then submit order", async () => {
    await createTenant(db(), "a");
    const keyed = await submit("a", 3, { concurrency_key: "repo-1" });
    const [other] = await submit("a", 1, { concurrency_key: "repo-2" });
    const [plain] = await submit("a", 1);
    const first = (await claim(8)).map((c) => c.jobId).sort();
    expect(first).toEqual([keyed[0], other, plain].sort());
    expect(await claim(8)).toEqual([]);
    await finish(keyed[0] as string);
    expect((await claim(8)).map((c) => c.jobId)).toEqual([keyed[1]]);
  });

  test("racing claimers on separate connections never pass a cap or share a key", async () => {
    await createTenant(db(), "capped");
    await createTenant(db(), "keyed");
    await setTenantSettings(db(), "capped", { maxRunning: 3 });
    await submit("capped", 20);
    await submit("keyed", 10, { concurrency_key: "k" });
    for (let round = 0; round < 3; round++) {
      // 10 claimers at the same moment, each its own pool connection and transaction.
      const won = (await Promise.all(Array.from({ length: 10 }, (_, i) => claim(2, `h${i}`)))).flat();
      const held = (
        await t.pool.query<{ tenant_id: string; n: string }>(
          "SELECT tenant_id, count(*) AS n FROM jobs WHERE owner IS NOT NULL AND state IN ('queued','running') GROUP BY tenant_id ORDER BY tenant_id",
        )
      ).rows.map((r) => [r.tenant_id, Number(r.n)]);
      expect(held).toEqual([
        ["capped", 3],
        ["keyed", 1],
      ]);
      expect(won.length).toBe(round === 0 ? 4 : 0);
    }
  });

  test("a claim that saw the last slot or the key free misses when an uncommitted claim took it first", async () => {
    // The interleaving SKIP LOCKED alone does not stop: claimer 1 has claimed (not committed yet)
    // the tenant's last free slot and its key's head; a higher-priority job arrives; claimer 2's
    // snapshot shows the slot and the key free and picks the new job, a row claimer 1 never
    // locked. The unique indexes make claimer 2 wait for claimer 1 and then fail; its retry sees
    // claimer 1's claims and takes nothing.
    await createTenant(db(), "capped");
    await createTenant(db(), "keyed");
    await setTenantSettings(db(), "capped", { maxRunning: 1 });
    await submit("capped", 1);
    await submit("keyed", 1, { concurrency_key: "k" });
    const client = await t.pool.connect();
    try {
      const inTx = drizzle({ client, schema }) as unknown as Db;
      await client.query("BEGIN");
      const first = await claimFromPostgres(inTx, "h1", [randomUUID(), randomUUID()]);
      expect(first.length).toBe(2);
      await submit("capped", 1, { priority: 10 });
      await submit("keyed", 1, { concurrency_key: "k", priority: 10 });
      const second = claim(2, "h2");
      await new Promise((r) => setTimeout(r, 300));
      await client.query("COMMIT");
      expect(await second).toEqual([]);
    } finally {
      client.release();
    }
    const held = (
      await t.pool.query<{ tenant_id: string; n: string }>(
        "SELECT tenant_id, count(*) AS n FROM jobs WHERE owner IS NOT NULL AND state IN ('queued','running') GROUP BY tenant_id ORDER BY tenant_id",
      )
    ).rows.map((r) => [r.tenant_id, Number(r.n)]);
    expect(held).toEqual([
      ["capped", 1],
      ["keyed", 1],
    ]);
  });
});
