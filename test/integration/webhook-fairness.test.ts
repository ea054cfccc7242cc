/**
 * One tenant's slow webhook endpoints must not delay another tenant's deliveries (docs/limits.md
 * "Webhook deliveries"). A reduced run of the reported scenario: two real hosts, tenant A with 8
 * endpoints that answer only after 3 s (past the hosts' 2 s attempt timeout, as 15 s is past the
 * 10 s default) and 240 deliveries owed to them (30 jobs × 8); then tenant B's one delivery to an
 * endpoint that answers at once. Before the claim was fair, B's row waited behind all of A's in
 * one global order; now it takes a slot A may not fill. And A's endpoints, timing out attempt after
 * attempt, are paused with the reason on their API view, so they stop holding slots at all.
 * And a tenant at its cap of pending deliveries gets the next one recorded `dropped`, counted on the
 * endpoint's view and on the hosts' /metrics, not queued without bound and not lost silently.
 * The endpoints are a server this test runs on 127.0.0.1.
 */
import { createServer } from "node:http";
import type { AddressInfo } from "node:net";
import { drizzle } from "drizzle-orm/node-postgres";
import { afterAll, describe, expect, it } from "vitest";
import { WEBHOOK_LIMITS } from "../../src/contracts/webhook";
import * as schema from "../../src/db/schema";
import { createApiKey, createTenant } from "../../src/db/tenants-repo";
import { newWebhookSecret } from "../../src/domain/webhook-signature";
import { waitFor } from "../../tools/stack/services/ports";
import { apiClient } from "../helpers/api";
import { sampleValue } from "../helpers/metrics";
import { useStack } from "../helpers/stack";

const SLOW_ANSWER_MS = 3_000;
const TIMEOUT_MS = 2_000;

const arrivals: Array<{ path: string; at: number }> = [];
const open = new Set<() => void>();
const server = createServer((req, res) => {
  req.resume();
  req.on("end", () => {
    const path = req.url ?? "";
    arrivals.push({ path, at: Date.now() });
    if (path.startsWith("/hooks/slow")) {
      const done = () => {
        open.delete(done);
        if (!res.destroyed) res.writeHead(204).end();
      };
      open.add(done);
      setTimeout(done, SLOW_ANSWER_MS);
      return;
    }
    res.writeHead(204).end();
  });
});
await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
const HOOKS = `http://127.0.0.1:${(server.address() as AddressInfo).port}/hooks/`;
afterAll(async () => {
  for (const done of [...open]) done();
  await new Promise((r) => server.close(r));
});

interface WebhookView {
  id: string;
  paused_until: string | null;
  pause_reason: string | null;
  consecutive_failures: number;
}

describe("webhook fairness across tenants", () => {
  const t = useStack({
    hosts: 2,
    gatewayVars: { WEBHOOK_ALLOWED_URLS: HOOKS },
    hostEnv: {
      WEBHOOK_ALLOWED_URLS: HOOKS,
      HOST_WEBHOOK_POLL_MS: "500",
      HOST_WEBHOOK_TIMEOUT_MS: String(TIMEOUT_MS),
    },
  });
  const api = () => apiClient(t.stack.gatewayUrl, t.stack.apiKey);

  it("a tenant's 240 deliveries to 8 endpoints that time out delay another tenant's first delivery by less than one attempt, and the endpoints are paused with a reason", async () => {
    // Tenant A is the stack's own tenant (its endpoints made through the API); B is a second one.
    const a = t.stack.tenantId;
    const slow: string[] = [];
    for (let i = 0; i < 8; i++) {
      const r = await api().call<{ webhook: { id: string } }>("POST", "/v1/webhooks", {
        url: `${HOOKS}slow-${i}`,
        events: ["job.completed"],
      });
      expect(r.status).toBe(201);
      slow.push(r.body.webhook.id);
    }
    const b = "tenant-b";
    await createTenant(drizzle({ client: t.pool, schema }), b, "the other tenant");
    const bHook = crypto.randomUUID();
    await t.pool.query(
      `INSERT INTO webhooks (id, tenant_id, url, events, secret) VALUES ($1, $2, $3, '["job.completed"]', $4)`,
      [bHook, b, `${HOOKS}fast-b`, newWebhookSecret()],
    );

    // 30 jobs × 8 endpoints, as the outbox trigger would have queued them.
    const jobs = Array.from({ length: 30 }, () => crypto.randomUUID());
    await t.pool.query(
      `INSERT INTO webhook_deliveries (webhook_id, tenant_id, job_id, event_type)
       SELECT w, $1, j, 'job.completed' FROM unnest($2::uuid[]) w CROSS JOIN unnest($3::uuid[]) j`,
      [a, slow, jobs],
    );
    await t.pool.query("SELECT pg_notify('ear_webhook', '')");
    await waitFor(
      "A's endpoints are being sent to",
      async () => arrivals.filter((x) => x.path.startsWith("/hooks/slow")).length >= 16,
    );

    const inserted = Date.now();
    await t.pool.query(
      `INSERT INTO webhook_deliveries (webhook_id, tenant_id, job_id, event_type) VALUES ($1, $2, $3, 'job.completed')`,
      [bHook, b, crypto.randomUUID()],
    );
    await t.pool.query("SELECT pg_notify('ear_webhook', '')");
    const got = await waitFor(
      "B's delivery arrived",
      async () => arrivals.find((x) => x.path === "/hooks/fast-b" && x.at >= inserted),
      { timeoutMs: 50_000, intervalMs: 10 },
    );
    const waitMs = got.at - inserted;
    console.log(
      `webhook fairness: tenant B's first delivery waited ${waitMs} ms behind tenant A's 240 deliveries to 8 endpoints answering after ${SLOW_ANSWER_MS} ms (attempt timeout ${TIMEOUT_MS} ms, 2 hosts, 16 slots each)`,
    );
    // Less than one of A's attempts: B did not wait for a slot A held.
    expect(waitMs).toBeLessThan(TIMEOUT_MS);

    // A's endpoints kept timing out: each is paused, and says why, on its view.
    const views = await waitFor(
      "A's endpoints paused",
      async () => {
        const r = await api().call<{ webhooks: WebhookView[] }>("GET", "/v1/webhooks");
        const mine = r.body.webhooks.filter((w) => slow.includes(w.id));
        return mine.length === 8 && mine.every((w) => w.paused_until !== null) ? mine : null;
      },
      { timeoutMs: 30_000, intervalMs: 200 },
    );
    for (const w of views) {
      expect(w.consecutive_failures).toBeGreaterThanOrEqual(WEBHOOK_LIMITS.pauseAfterFailures);
      expect(w.pause_reason).toMatch(/consecutive failed attempts; last: no answer within 2000 ms/);
      expect(Date.parse(w.paused_until as string)).toBeGreaterThan(Date.now());
    }
    // Paused: no new attempt starts to them (the ones already in flight end by their timeout).
    await new Promise((r) => setTimeout(r, TIMEOUT_MS + 500));
    const before = arrivals.filter((x) => x.path.startsWith("/hooks/slow")).length;
    await new Promise((r) => setTimeout(r, 3_000));
    expect(arrivals.filter((x) => x.path.startsWith("/hooks/slow")).length).toBe(before);
    const pending = await t.pool.query<{ n: string }>(
      "SELECT count(*) AS n FROM webhook_deliveries WHERE tenant_id = $1 AND state = 'pending'",
      [a],
    );
    // Nothing was given up: they wait for the pause to end.
    expect(Number(pending.rows[0]?.n)).toBeGreaterThan(0);
  }, 120_000);

  it("past a tenant's cap of pending deliveries, the next one is recorded dropped and counted on the view and /metrics; below it, queued again", async () => {
    const c = "tenant-c";
    await createTenant(drizzle({ client: t.pool, schema }), c, "a tenant at its cap");
    const hook = crypto.randomUUID();
    await t.pool.query(
      `INSERT INTO webhooks (id, tenant_id, url, events, secret) VALUES ($1, $2, $3, '["job.cancelled"]', $4)`,
      [hook, c, `${HOOKS}fast-c`, newWebhookSecret()],
    );
    // The tenant's backlog, at the cap, due in an hour (the hosts leave it alone meanwhile).
    await t.pool.query(
      `INSERT INTO webhook_deliveries (webhook_id, tenant_id, job_id, event_type, next_attempt_at)
       SELECT $1, $2, gen_random_uuid(), 'job.cancelled', now() + interval '1 hour'
       FROM generate_series(1, $3::int)`,
      [hook, c, WEBHOOK_LIMITS.maxPendingPerTenant],
    );
    /** A job of tenant C, running on a host the test plays, cancelled: the outbox trigger fires. */
    const cancelOne = async () => {
      const id = crypto.randomUUID();
      await t.pool.query(
        `INSERT INTO jobs (id, tenant_id, input, state, owner, claimed_at, epoch, token, execution_id,
           execution_started_at, started_at, heartbeat_at)
         VALUES ($1, $2, '{"messages":[{"role":"user","content":"x"}]}', 'running', 'test-host', now(), 1,
           gen_random_uuid(), gen_random_uuid(), now(), now(), now())`,
        [id, c],
      );
      await t.pool.query("UPDATE jobs SET state = 'cancelled', finished_at = now() WHERE id = $1", [id]);
      const r = await t.pool.query<{ state: string; finished: boolean }>(
        "SELECT state, finished_at IS NOT NULL AS finished FROM webhook_deliveries WHERE job_id = $1",
        [id],
      );
      return r.rows;
    };
    expect(await cancelOne()).toEqual([{ state: "dropped", finished: true }]);
    // Tenant C's own view of the endpoint counts it.
    const key = (await createApiKey(drizzle({ client: t.pool, schema }), c, "test")).key;
    const view = await apiClient(t.stack.gatewayUrl, key).call<{ webhook: { dropped_deliveries: number } }>(
      "GET",
      `/v1/webhooks/${hook}`,
    );
    expect(view.body.webhook.dropped_deliveries).toBe(1);
    const host = t.stack.hosts[0];
    expect(await sampleValue(host?.metricsUrl as string, "webhook_deliveries_dropped", { tenant: c })).toBe(1);

    // One fewer pending: the next one is queued (and sent) again.
    await t.pool.query(
      "DELETE FROM webhook_deliveries WHERE id = (SELECT id FROM webhook_deliveries WHERE tenant_id = $1 AND state = 'pending' LIMIT 1)",
      [c],
    );
    const again = await cancelOne();
    expect(again.map((d) => d.state)).toEqual(["pending"]);
    await waitFor("C's queued delivery sent", async () => arrivals.some((x) => x.path === "/hooks/fast-c"));
  }, 60_000);
});
