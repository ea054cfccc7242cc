/**
 * The webhook claim and result statements against a real Postgres (no hosts): who gets a host's
 * slots when several tenants have deliveries due (src/db/webhooks-repo.ts, claimDeliveries), and
 * how an endpoint that keeps failing is paused and probed (recordAttempt). The end-to-end run with
 * hosts and slow endpoints is test/integration/webhook-fairness.test.ts.
 */
import { describe, expect, it } from "vitest";
import { WEBHOOK_LIMITS } from "../../src/contracts/webhook";
import type { Db } from "../../src/db/client";
import { type AttemptResult, type ClaimedDelivery, claimDeliveries, recordAttempt } from "../../src/db/webhooks-repo";
import type { TestDb } from "../helpers/db";
import { postgresTest } from "../helpers/postgres-fixture";

const test = postgresTest({ connections: 4, tenants: ["a", "b", "c"] });
let t: TestDb;
const db = () => t.db as unknown as Db;

test.beforeAll(({ testDb }) => {
  t = testDb;
});

async function endpoint(tenant: string): Promise<string> {
  const id = crypto.randomUUID();
  await t.pool.query(
    `INSERT INTO webhooks (id, tenant_id, url, events, secret) VALUES ($1, $2, 'http://127.0.0.1:1/hooks/x', '["job.completed"]', 'whsec_AAAA')`,
    [id, tenant],
  );
  return id;
}

/** `n` deliveries due to the endpoint, `agoMs` old (older ones are first in their endpoint's line). */
async function due(webhookId: string, tenant: string, n: number, agoMs: number): Promise<void> {
  await t.pool.query(
    `INSERT INTO webhook_deliveries (webhook_id, tenant_id, job_id, event_type, next_attempt_at, created_at)
     SELECT $1, $2, gen_random_uuid(), 'job.completed', now() - make_interval(secs => $4::float8 / 1000),
       now() - make_interval(secs => $4::float8 / 1000)
     FROM generate_series(1, $3::int)`,
    [webhookId, tenant, n, agoMs],
  );
}

const claim = (
  free: number,
  busy: Record<string, number> = {},
  busyTenants: Record<string, number> = {},
): ReturnType<typeof claimDeliveries> =>
  claimDeliveries(db(), {
    free,
    concurrency: 16,
    shareAlone: WEBHOOK_LIMITS.tenantShareAlone,
    perEndpoint: WEBHOOK_LIMITS.perEndpointInFlight,
    failingAfter: WEBHOOK_LIMITS.pauseAfterFailures,
    busy,
    busyTenants,
    leaseMs: 60_000,
  });

const byTenant = (claimed: ClaimedDelivery[]) =>
  claimed.reduce<Record<string, number>>((m, d) => {
    m[d.tenantId] = (m[d.tenantId] ?? 0) + 1;
    return m;
  }, {});

const reset = () => t.pool.query("TRUNCATE webhook_attempts, webhook_deliveries, webhooks CASCADE");

const timedOut: AttemptResult = {
  statusCode: null,
  error: "no answer within 2000 ms",
  durationMs: 2000,
  delivered: false,
  retryInMs: 0,
  payload: "{}",
};

describe("claimDeliveries", () => {
  it("shares a host's slots between the tenants that have work, in turns, not in one global order", async () => {
    await reset();
    // Tenant a: 8 endpoints with an older backlog; b and c: one newer delivery line each.
    for (let i = 0; i < 8; i++) await due(await endpoint("a"), "a", 10, 60_000);
    await due(await endpoint("b"), "b", 3, 1_000);
    await due(await endpoint("c"), "c", 1, 500);
    const { claimed } = await claim(16);
    // 3 tenants: each at most 16 / 3 = 5; b and c get all their endpoint may take (2 and 1).
    expect(byTenant(claimed)).toEqual({ a: 5, b: 2, c: 1 });
  });

  it("leaves a quarter of the slots free while one tenant is alone, and gives the next tenant one at once", async () => {
    await reset();
    const aHooks: string[] = [];
    for (let i = 0; i < 8; i++) {
      const h = await endpoint("a");
      aHooks.push(h);
      await due(h, "a", 10, 60_000);
    }
    const first = await claim(16);
    expect(byTenant(first.claimed)).toEqual({ a: 12 });
    const busy = Object.fromEntries(aHooks.map((h) => [h, first.claimed.filter((d) => d.webhookId === h).length]));
    // Tenant a is at its share: nothing more for it, and the sender is not told to come back at once.
    const second = await claim(4, busy, { a: 12 });
    expect(second.claimed).toEqual([]);
    expect(second.nextInMs === null || second.nextInMs > 1_000).toBe(true);
    // Another tenant's delivery appears: one of the free slots is its.
    await due(await endpoint("b"), "b", 1, 0);
    const third = await claim(4, busy, { a: 12 });
    expect(byTenant(third.claimed)).toEqual({ b: 1 });
  });
});

describe("an endpoint that keeps failing", () => {
  it("is paused after 5 failures in a row with the reason, then probed one at a time, and a success clears it", async () => {
    await reset();
    const hook = await endpoint("a");
    await due(hook, "a", 20, 60_000);
    const view = async () =>
      (
        await t.pool.query<{
          consecutive_failures: number;
          paused: boolean;
          pause_reason: string | null;
          pause_ms: number;
        }>(
          "SELECT consecutive_failures, paused_until > now() AS paused, pause_reason, pause_ms FROM webhooks WHERE id = $1",
          [hook],
        )
      ).rows[0];

    for (let round = 0; round < 3; round++) {
      const { claimed } = await claim(16);
      for (const d of claimed) expect(await recordAttempt(db(), d, timedOut)).toBe(true);
    }
    // 2 + 2 failed, then the fifth paused it; the sixth, in flight alongside, left the pause as it was.
    expect(await view()).toMatchObject({
      consecutive_failures: 6,
      paused: true,
      pause_reason: "5 consecutive failed attempts; last: no answer within 2000 ms",
      pause_ms: WEBHOOK_LIMITS.pauseBaseMs,
    });
    const paused = await claim(16);
    expect(paused.claimed).toEqual([]);
    // The sender sleeps until the pause ends (its rows are due, but they must not make it spin).
    expect(paused.nextInMs).toBeGreaterThan(WEBHOOK_LIMITS.pauseBaseMs - 5_000);

    // The pause ends: one probe, not two; it fails, and the next pause is twice as long.
    await t.pool.query("UPDATE webhooks SET paused_until = now() - interval '1 second' WHERE id = $1", [hook]);
    const probe = await claim(16);
    expect(probe.claimed).toHaveLength(1);
    await recordAttempt(db(), probe.claimed[0] as ClaimedDelivery, timedOut);
    expect(await view()).toMatchObject({
      consecutive_failures: 7,
      paused: true,
      pause_ms: 2 * WEBHOOK_LIMITS.pauseBaseMs,
    });

    // A probe that is delivered clears it; the endpoint gets its 2 slots back.
    await t.pool.query("UPDATE webhooks SET paused_until = now() - interval '1 second' WHERE id = $1", [hook]);
    const [ok] = (await claim(16)).claimed;
    await recordAttempt(db(), ok as ClaimedDelivery, {
      ...timedOut,
      statusCode: 204,
      error: null,
      delivered: true,
      retryInMs: null,
    });
    expect(await view()).toMatchObject({ consecutive_failures: 0, paused: null, pause_reason: null, pause_ms: 0 });
    expect((await claim(16)).claimed).toHaveLength(2);
  });
});
