/**
 * Webhooks end to end (docs/api.md "Webhooks"): the routes in workerd, the outbox trigger in
 * Postgres, and real host processes sending to an endpoint this test serves. Every delivery's
 * signature is verified with the `standardwebhooks` package (the spec's reference library), not
 * with our own signing code. Covered: an endpoint outside WEBHOOK_ALLOWED_URLS is a 400; a host
 * SIGKILLed between a job's terminal write and the send (it sends nothing) loses nothing, and one
 * SIGKILLed mid-send is retried by another host under the same webhook-id; an endpoint answering
 * 500 once gets the retry within ~2 s under the same webhook-id; the delivery log shows each attempt.
 */
import { createServer, type IncomingHttpHeaders } from "node:http";
import type { AddressInfo } from "node:net";
import { drizzle } from "drizzle-orm/node-postgres";
import { Webhook } from "standardwebhooks";
import { afterAll, describe, expect, it } from "vitest";
import type { Db } from "../../src/db/client";
import { recoveryPass } from "../../src/db/recovery-pass";
import * as schema from "../../src/db/schema";
import { suspendJob } from "../../src/db/wait-repo";
import { waitFor } from "../../tools/stack/services/ports";
import { apiClient, longRunMessage, userMessage } from "../helpers/api";
import { useStack } from "../helpers/stack";

interface Received {
  path: string;
  headers: IncomingHttpHeaders;
  body: string;
  at: number;
}

/** The endpoint: /hooks/ok answers 204, /hooks/fail-once 500 to an id's first request, /hooks/hang-once never answers it. */
const received: Received[] = [];
const seen = new Map<string, number>();
const hanging: Array<() => void> = [];
const server = createServer((req, res) => {
  const chunks: Buffer[] = [];
  req.on("data", (c: Buffer) => chunks.push(c));
  req.on("end", () => {
    const r = {
      path: req.url ?? "",
      headers: req.headers,
      body: Buffer.concat(chunks).toString("utf8"),
      at: Date.now(),
    };
    received.push(r);
    const key = `${r.path} ${String(req.headers["webhook-id"])}`;
    const n = (seen.get(key) ?? 0) + 1;
    seen.set(key, n);
    if (r.path === "/hooks/fail-once" && n === 1) return res.writeHead(500).end("not yet");
    if (r.path === "/hooks/hang-once" && n === 1) return void hanging.push(() => res.destroy());
    if (r.path === "/hooks/slow") return void setTimeout(() => res.writeHead(204).end(), 3000);
    if (r.path === "/hooks/redirect") return res.writeHead(302, { location: "http://127.0.0.1:1/elsewhere" }).end();
    res.writeHead(204).end();
  });
});
await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
const HOOKS = `http://127.0.0.1:${(server.address() as AddressInfo).port}/hooks/`;
afterAll(async () => {
  for (const h of hanging) h();
  await new Promise((r) => server.close(r));
});

interface Delivery {
  id: string;
  job_id: string;
  event_type: string;
  state: string;
  attempts: Array<{ status_code: number | null; error: string | null; duration_ms: number; attempted_at: string }>;
}

describe("webhooks", () => {
  const t = useStack({
    hosts: 0,
    gatewayVars: { WEBHOOK_ALLOWED_URLS: HOOKS },
    hostEnv: { WEBHOOK_ALLOWED_URLS: HOOKS, HOST_WEBHOOK_POLL_MS: "500" },
  });
  const api = () => apiClient(t.stack.gatewayUrl, t.stack.apiKey);

  async function addWebhook(path: string, events = ["job.completed"]): Promise<{ id: string; secret: string }> {
    const r = await api().call<{ webhook: { id: string; secret: string; url: string; events: string[] } }>(
      "POST",
      "/v1/webhooks",
      { url: `${HOOKS}${path}`, events },
    );
    expect(r.status).toBe(201);
    return r.body.webhook;
  }

  async function submit(): Promise<string> {
    const r = await api().call<{ job: { id: string } }>("POST", "/v1/jobs", userMessage("tell the hook"));
    expect(r.status).toBe(202);
    return r.body.job.id;
  }

  const deliveries = async (webhookId: string) =>
    (await api().call<{ deliveries: Delivery[] }>("GET", `/v1/webhooks/${webhookId}/deliveries`)).body.deliveries;

  /** What the endpoint got for one delivery, each verified with `standardwebhooks` (throws if not). */
  function verified(secret: string, path: string, webhookId: string) {
    return received
      .filter((r) => r.path === `/hooks/${path}` && r.headers["webhook-id"] === webhookId)
      .map((r) => {
        const payload = new Webhook(secret).verify(r.body, r.headers as Record<string, string>) as {
          type: string;
          timestamp: string;
          data: { job: { id: string; state: string } };
        };
        return { payload, at: r.at, body: r.body };
      });
  }

  it("refuses an endpoint outside WEBHOOK_ALLOWED_URLS (400), and shows the secret only at create", async () => {
    for (const url of ["http://127.0.0.1:1/hooks/", `${HOOKS.replace("/hooks/", "/other/")}x`, "ftp://example.com/"]) {
      const r = await api().call<{ error: { code: string; message: string } }>("POST", "/v1/webhooks", {
        url,
        events: ["job.completed"],
      });
      expect(r.status, url).toBe(400);
      expect(r.body.error.message).toMatch(/^url: /);
    }
    const badEvent = await api().call("POST", "/v1/webhooks", { url: `${HOOKS}ok`, events: ["job.started"] });
    expect(badEvent.status).toBe(400);

    const w = await addWebhook("ok", ["job.completed", "job.failed"]);
    expect(w.secret).toMatch(/^whsec_[A-Za-z0-9+/]{32}$/);
    const got = await api().call<{ webhook: Record<string, unknown> }>("GET", `/v1/webhooks/${w.id}`);
    expect(got.body.webhook).toMatchObject({ id: w.id, url: `${HOOKS}ok`, events: ["job.completed", "job.failed"] });
    expect(got.body.webhook).not.toHaveProperty("secret");
    const list = await api().call<{ webhooks: Array<Record<string, unknown>> }>("GET", "/v1/webhooks");
    expect(list.body.webhooks.map((x) => x.id)).toContain(w.id);
    expect(JSON.stringify(list.body)).not.toContain(w.secret);
    expect((await api().call("DELETE", `/v1/webhooks/${w.id}`)).status).toBe(204);
    expect((await api().call("GET", `/v1/webhooks/${w.id}`)).status).toBe(404);
  });

  it("a host killed between the terminal write and the send, and one killed mid-send, lose nothing: another host sends under the same webhook-id", async () => {
    const ok = await addWebhook("ok");
    const hang = await addWebhook("hang-once");
    // Host A runs the job and sends no webhooks: its death right after the terminal write is the crash.
    const a = await t.stack.addHost({ HOST_WEBHOOK_POLL_MS: "0" });
    const job = await submit();
    const rows = await waitFor(
      "the job completed and its deliveries queued by the terminal statement",
      async () => {
        const r = await t.pool.query<{ state: string; n: string }>(
          `SELECT j.state, (SELECT count(*) FROM webhook_deliveries d WHERE d.job_id = j.id AND d.state = 'pending' AND d.attempts = 0) AS n
           FROM jobs j WHERE j.id = $1`,
          [job],
        );
        return r.rows[0]?.state === "completed" ? r.rows[0] : null;
      },
      { timeoutMs: 30_000 },
    );
    expect(Number(rows.n)).toBe(2);
    process.kill(-(a.process.pid as number), "SIGKILL");
    expect(received.filter((r) => r.body.includes(job))).toEqual([]);

    // Host B sends both; the hang-once endpoint never answers B, and B is killed mid-send.
    const b = await t.stack.addHost({ HOST_WEBHOOK_TIMEOUT_MS: "1000" });
    await waitFor("B delivered to ok and is stuck sending to hang-once", async () => {
      const [d] = await deliveries(ok.id);
      return d?.state === "delivered" && hanging.length === 1;
    });
    process.kill(-(b.process.pid as number), "SIGKILL");
    // Host C takes the hang-once delivery once B's lease (1 s timeout + 5 s margin) has run out.
    await t.stack.addHost();
    const [redelivered] = await waitFor(
      "hang-once delivered by C",
      async () => {
        const d = await deliveries(hang.id);
        return d[0]?.state === "delivered" ? d : null;
      },
      { timeoutMs: 30_000 },
    );
    const toOk = verified(ok.secret, "ok", (await deliveries(ok.id))[0]?.id as string);
    expect(toOk).toHaveLength(1);
    expect(toOk[0]?.payload).toMatchObject({ type: "job.completed", data: { job: { id: job, state: "completed" } } });
    const toHang = verified(hang.secret, "hang-once", redelivered?.id as string);
    expect(toHang).toHaveLength(2);
    expect(toHang[1]?.body).toBe(toHang[0]?.body);
    expect(toHang[1]?.payload).toMatchObject({ type: "job.completed", data: { job: { id: job } } });
    // The killed attempt left no row (its host died before writing it); C's is the one recorded.
    expect(redelivered?.attempts.map((x) => x.status_code)).toEqual([204]);
    for (const w of [ok, hang]) expect((await api().call("DELETE", `/v1/webhooks/${w.id}`)).status).toBe(204);
  }, 120_000);

  it("an endpoint answering 500 once is retried within ~2 s under the same webhook-id, both signatures verify, the log shows both attempts", async () => {
    const flaky = await addWebhook("fail-once", ["job.completed", "job.failed"]);
    const wrongEvents = await addWebhook("ok", ["job.failed"]);
    const job = await submit();
    const [d] = await waitFor(
      "delivered after one retry",
      async () => {
        const list = await deliveries(flaky.id);
        return list[0]?.state === "delivered" ? list : null;
      },
      { timeoutMs: 30_000 },
    );
    expect(d).toMatchObject({ job_id: job, event_type: "job.completed", state: "delivered" });
    expect(d?.attempts.map((a) => [a.status_code, a.error])).toEqual([
      [500, "HTTP 500"],
      [204, null],
    ]);
    for (const a of d?.attempts ?? []) expect(a.duration_ms).toBeGreaterThanOrEqual(0);
    const got = verified(flaky.secret, "fail-once", d?.id as string);
    expect(got).toHaveLength(2);
    expect(got.map((g) => g.payload.type)).toEqual(["job.completed", "job.completed"]);
    expect(got[0]?.body).toBe(got[1]?.body);
    // First retry: backoff below 2 s, plus the sender's poll (500 ms here) and the attempt itself.
    const gap = (got[1]?.at as number) - (got[0]?.at as number);
    expect(gap).toBeLessThan(3000);
    console.log(`webhook first retry came ${gap} ms after the 500`);
    // A signature made with another secret does not verify: the check can fail.
    const [first] = received.filter((r) => r.headers["webhook-id"] === d?.id);
    expect(() =>
      new Webhook(wrongEvents.secret).verify(first?.body as string, first?.headers as Record<string, string>),
    ).toThrow();
    // The endpoint subscribed to job.failed only got nothing for a completed job.
    expect(await deliveries(wrongEvents.id)).toEqual([]);

    // A manual retry sends it again, under the same id.
    const retry = await api().call<{ delivery: Delivery }>(
      "POST",
      `/v1/webhooks/${flaky.id}/deliveries/${d?.id}/retry`,
    );
    expect(retry.status).toBe(202);
    expect(retry.body.delivery.state).toBe("pending");
    await waitFor(
      "the manual retry arrived",
      async () => verified(flaky.secret, "fail-once", d?.id as string).length === 3,
    );
    expect((await api().call("POST", `/v1/webhooks/${flaky.id}/deliveries/${crypto.randomUUID()}/retry`)).status).toBe(
      404,
    );
  }, 60_000);

  it("a redirect is not followed: the attempt fails and is retried", async () => {
    const w = await addWebhook("redirect");
    await submit();
    const [d] = await waitFor(
      "two failed attempts",
      async () => {
        const list = await deliveries(w.id);
        return (list[0]?.attempts.length ?? 0) >= 2 ? list : null;
      },
      { timeoutMs: 30_000 },
    );
    expect(d?.state).toBe("pending");
    expect(d?.attempts[0]).toMatchObject({ status_code: 302, error: "redirect not followed" });
    expect(received.some((r) => r.path === "/elsewhere")).toBe(false);
    expect((await api().call("DELETE", `/v1/webhooks/${w.id}`)).status).toBe(204);
  }, 60_000);

  it("job.cancelled (a cancel through the API, the host's terminal write), job.lost (the recovery pass) and job.waiting (a suspend) are queued by the same trigger", async () => {
    const w = await addWebhook("ok", ["job.cancelled", "job.lost", "job.waiting"]);
    const cancelled = (await api().call<{ job: { id: string } }>("POST", "/v1/jobs", longRunMessage())).body.job.id;
    await waitFor("running", async () => {
      const r = await t.pool.query("SELECT 1 FROM jobs WHERE id = $1 AND state = 'running'", [cancelled]);
      return (r.rowCount ?? 0) > 0;
    });
    expect((await api().call("POST", `/v1/jobs/${cancelled}/cancel`)).status).toBeLessThan(300);
    // A run whose host died an hour ago, written as that host left it, its recoveries spent (a
    // job with recoveries left is re-queued, not lost); the pass any host or the cron runs ends it.
    const lost = crypto.randomUUID();
    await t.pool.query(
      `INSERT INTO jobs (id, tenant_id, input, state, owner, claimed_at, epoch, token, execution_id,
         execution_started_at, started_at, heartbeat_at, recoveries)
       VALUES ($1, $2, '{"messages":[{"role":"user","content":"x"}]}', 'running', 'dead-host', now(), 1,
         gen_random_uuid(), gen_random_uuid(), now(), now(), now() - interval '1 hour', 3)`,
      [lost, t.stack.tenantId],
    );
    const db = drizzle({ client: t.pool, schema }) as unknown as Db;
    const pass = await recoveryPass({
      db,
      limits: { claimTimeoutMs: 10_000, runLostAfterMs: 8_000 },
      log: { info() {}, warn() {} },
    });
    expect(pass.reaped.map((r) => r.id)).toContain(lost);
    // A run (of a host the test plays) suspending at a gated call: the waitpoint's own statement.
    const waiting = {
      jobId: crypto.randomUUID(),
      host: "test-host",
      epoch: 1,
      token: crypto.randomUUID(),
      executionId: crypto.randomUUID(),
    };
    await t.pool.query(
      `INSERT INTO jobs (id, tenant_id, input, state, owner, claimed_at, epoch, token, execution_id,
         execution_started_at, started_at, heartbeat_at)
       VALUES ($1, $2, '{"messages":[{"role":"user","content":"x"}]}', 'running', $3, now(), 1, $4, $5, now(), now(), now())`,
      [waiting.jobId, t.stack.tenantId, waiting.host, waiting.token, waiting.executionId],
    );
    await t.pool.query("INSERT INTO executions (id, job_id, host, epoch, token) VALUES ($1, $2, $3, 1, $4)", [
      waiting.executionId,
      waiting.jobId,
      waiting.host,
      waiting.token,
    ]);
    const suspended = await suspendJob(db, waiting, {
      kind: "approval",
      callId: "call-1",
      tool: "shell",
      arguments: {},
      question: null,
      deadlineS: 3600,
      onDeadline: "deny",
      checkpoint: { v: 1 },
    });
    expect(suspended.suspended).toBe(true);
    const got = await waitFor(
      "all three delivered",
      async () => {
        const d = await deliveries(w.id);
        return d.length === 3 && d.every((x) => x.state === "delivered") ? d : null;
      },
      { timeoutMs: 30_000 },
    );
    expect(Object.fromEntries(got.map((d) => [d.job_id, d.event_type]))).toEqual({
      [cancelled]: "job.cancelled",
      [lost]: "job.lost",
      [waiting.jobId]: "job.waiting",
    });
    for (const d of got) {
      const [v] = verified(w.secret, "ok", d.id);
      expect(v?.payload.data.job.state).toBe(d.event_type.slice(4));
    }
    expect((await api().call("DELETE", `/v1/webhooks/${w.id}`)).status).toBe(204);
  }, 60_000);

  it("one slow endpoint stalls no other: 300 deliveries to a fast one go through while a 3 s one holds its 2 slots", async () => {
    const fast = await addWebhook("ok", ["job.completed"]);
    const slow = await addWebhook("slow", ["job.completed"]);
    const [anyJob] = (
      await t.pool.query<{ id: string }>("SELECT id FROM jobs WHERE tenant_id = $1 LIMIT 1", [t.stack.tenantId])
    ).rows;
    const insert = (webhookId: string, n: number) =>
      t.pool.query(
        `INSERT INTO webhook_deliveries (webhook_id, tenant_id, job_id, event_type)
         SELECT $1, $2, $3, 'job.completed' FROM generate_series(1, $4::int); SELECT pg_notify('ear_webhook', '')`.split(
          ";",
        )[0] as string,
        [webhookId, t.stack.tenantId, anyJob?.id, n],
      );
    await insert(slow.id, 20);
    const started = Date.now();
    await insert(fast.id, 300);
    await t.pool.query("SELECT pg_notify('ear_webhook', '')");
    await waitFor(
      "the fast endpoint's 300 delivered",
      async () => {
        const r = await t.pool.query<{ n: string }>(
          "SELECT count(*) AS n FROM webhook_deliveries WHERE webhook_id = $1 AND state = 'delivered'",
          [fast.id],
        );
        return Number(r.rows[0]?.n) === 300;
      },
      { timeoutMs: 60_000, intervalMs: 20 },
    );
    const elapsedMs = Date.now() - started;
    const slowDone = await t.pool.query<{ n: string }>(
      "SELECT count(*) AS n FROM webhook_deliveries WHERE webhook_id = $1 AND state = 'delivered'",
      [slow.id],
    );
    // 20 at 3 s each, 2 at a time, take ≥ 30 s: the fast endpoint did not wait for them.
    expect(Number(slowDone.rows[0]?.n)).toBeLessThan(20);
    const inFlightToSlow = received.filter((r) => r.path === "/hooks/slow").length;
    expect(inFlightToSlow).toBeLessThanOrEqual(2 * Math.ceil(elapsedMs / 3000) + 2);
    console.log(
      `webhook deliveries: 300 to a fast endpoint in ${elapsedMs} ms (${Math.round((300 * 1000) / elapsedMs)}/s, one host, 16 slots) while a 3 s endpoint took ${inFlightToSlow} requests`,
    );
    for (const w of [fast, slow]) expect((await api().call("DELETE", `/v1/webhooks/${w.id}`)).status).toBe(204);

    // Spread over 8 endpoints, the host's 16 slots are all in use (2 per endpoint).
    const eight = await Promise.all(Array.from({ length: 8 }, () => addWebhook("ok", ["job.completed"])));
    const spreadStarted = Date.now();
    for (const w of eight) await insert(w.id, 50);
    await t.pool.query("SELECT pg_notify('ear_webhook', '')");
    await waitFor(
      "400 over 8 endpoints delivered",
      async () => {
        const r = await t.pool.query<{ n: string }>(
          "SELECT count(*) AS n FROM webhook_deliveries WHERE webhook_id = ANY($1::uuid[]) AND state = 'delivered'",
          [eight.map((w) => w.id)],
        );
        return Number(r.rows[0]?.n) === 400;
      },
      { timeoutMs: 60_000, intervalMs: 20 },
    );
    const spreadMs = Date.now() - spreadStarted;
    console.log(
      `webhook deliveries: 400 over 8 endpoints in ${spreadMs} ms (${Math.round((400 * 1000) / spreadMs)}/s, one host, 16 slots)`,
    );
    for (const w of eight) expect((await api().call("DELETE", `/v1/webhooks/${w.id}`)).status).toBe(204);
  }, 120_000);
});
