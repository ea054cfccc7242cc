/**
 * The job spine end to end, through the real parts: the gateway under wrangler dev (workerd),
 * Postgres via the Neon driver's local proxy, Redis via the Upstash REST bridge, the mock model
 * and a real sandbox-host process: submit → claim → stream → completed.
 */
import { request as httpRequest } from "node:http";
import { drizzle } from "drizzle-orm/node-postgres";
import type pg from "pg";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { EarClient } from "../../src/client/client";
import * as schema from "../../src/db/schema";
import { createApiKey, createTenant, revokeApiKey } from "../../src/db/tenants-repo";
import { signedHeaders } from "../../src/domain/signing";
import { type Stack, startStack } from "../../tools/stack/start";
import { apiClient, userMessage } from "../helpers/api";
import { testPool } from "../helpers/db";
import { requireBinary } from "../helpers/require";

const canRun = await requireBinary("redis-server", "apt-get install redis-server");

interface JobBody {
  job: {
    id: string;
    state: string;
    output: string | null;
    epoch: number;
    execution_id: string | null;
    created_at: string;
    started_at: string | null;
    prepared_at: string | null;
    first_output_at: string | null;
    finished_at: string | null;
    latency: Record<string, number | null>;
  };
}

describe.skipIf(!canRun)("job spine end to end", () => {
  let stack: Stack;
  let api: ReturnType<typeof apiClient>;
  /** The typed client (src/client/), as an application would call the API. */
  let client: EarClient;
  let otherKey: string;
  let pool: pg.Pool;

  beforeAll(async () => {
    stack = await startStack({ hosts: 1, mockModel: { ttftMs: 5, tokensPerS: 2000 } });
    api = apiClient(stack.gatewayUrl, stack.apiKey);
    client = new EarClient({ baseUrl: stack.gatewayUrl, credential: stack.apiKey });
    pool = testPool(stack.databaseUrl, 2);
    const db = drizzle(pool, { schema });
    await createTenant(db, "other");
    otherKey = (await createApiKey(db, "other")).key;
  }, 180_000);

  afterAll(async () => {
    await pool?.end();
    await stack?.stop();
  }, 60_000);

  async function waitTerminal(id: string): Promise<JobBody["job"]> {
    const deadline = Date.now() + 20_000;
    for (;;) {
      const r = await api.call<JobBody>("GET", `/v1/jobs/${id}`);
      if (!["queued", "running"].includes(r.body.job.state)) return r.body.job;
      if (Date.now() > deadline) throw new Error(`job ${id} still ${r.body.job.state}`);
      await new Promise((res) => setTimeout(res, 50));
    }
  }

  it("serves a job end to end: deltas over SSE, ids contiguous from 1, completed with timing facts", async () => {
    const submit = await client.submit(userMessage("hello there world"));
    expect(submit.created).toBe(true);
    expect(submit.job.state).toBe("queued");
    const events = [];
    for await (const e of client.events(submit.job.id)) events.push(e);
    expect(events.map((e) => e.id)).toEqual(events.map((_, i) => i + 1));
    const types = events.map((e) => e.event.type);
    expect(types[0]).toBe("run.started");
    expect(types).toContain("run.prepared");
    expect(types.filter((t) => t === "model.delta").length).toBeGreaterThan(0);
    expect(types.at(-1)).toBe("run.completed");
    expect(types.filter((t) => t.startsWith("run.") && ["run.completed", "run.failed"].includes(t))).toHaveLength(1);
    const text = events.map(({ event }) => (event.type === "model.delta" ? event.payload.text : "")).join("");
    expect(text).toBe("Echo: hello there world");
    expect(events[0]?.event).toMatchObject({ job_id: submit.job.id, seq: 1, type: "run.started" });
    // The same events as the raw stream carries (the client adds nothing and drops nothing).
    const raw = await api.events(submit.job.id);
    expect(raw.map((e) => JSON.parse(e.data))).toEqual(events.map((e) => e.event));

    const job = await waitTerminal(submit.job.id);
    expect(job.state).toBe("completed");
    expect(job.output).toBe("Echo: hello there world");
    expect(job.epoch).toBe(1);
    const points = [job.created_at, job.started_at, job.prepared_at, job.first_output_at, job.finished_at];
    for (const p of points) expect(p).not.toBeNull();
    const times = points.map((p) => Date.parse(p as string));
    expect([...times].sort((a, b) => a - b)).toEqual(times);
    for (const v of Object.values(job.latency)) {
      expect(v).not.toBeNull();
      expect(v).toBeGreaterThanOrEqual(0);
    }
  });

  it("replays exactly the missing tail after a reconnect (Last-Event-ID and ?after=)", async () => {
    // 50 tokens/s spaces deltas ~20 ms apart, wider than the host's 5 ms delta coalescing.
    const script = { reply: "one two three four five six seven", tokens_per_s: 50 };
    const submit = await api.call<JobBody>("POST", "/v1/jobs", userMessage(`!mock ${JSON.stringify(script)}`));
    const all = await api.events(submit.body.job.id);
    expect(all.length).toBeGreaterThan(4);
    for (const cut of [1, 3, all.length - 1]) {
      const tail = await api.events(submit.body.job.id, { lastEventId: cut });
      expect(tail.map((e) => e.id)).toEqual(all.slice(cut).map((e) => e.id));
      expect(tail.map((e) => e.data)).toEqual(all.slice(cut).map((e) => e.data));
      const viaQuery = await api.events(submit.body.job.id, { after: cut });
      expect(viaQuery.map((e) => e.id)).toEqual(all.slice(cut).map((e) => e.id));
    }
    // Finished and nothing after the cursor: 204, the answer that stops a browser's EventSource.
    const none = await api.call("GET", `/v1/jobs/${submit.body.job.id}/events?after=${all.length}`);
    expect(none.status).toBe(204);
    expect(none.body).toBe("");
    const bad = await api.call("GET", `/v1/jobs/${submit.body.job.id}/events?after=-3`);
    expect(bad.status).toBe(400);
  });

  it("rejects missing, malformed, unknown and revoked keys with 401 in the error shape", async () => {
    for (const key of [null, "nonsense", `ear_00000000_${"0".repeat(64)}`]) {
      const r = await apiClient(stack.gatewayUrl, key).call("GET", "/v1/jobs");
      expect(r.status).toBe(401);
      expect(r.body).toMatchObject({ error: { code: "unauthorized" } });
    }
    const db = drizzle(pool, { schema });
    const k = await createApiKey(db, "other", "to revoke");
    expect((await apiClient(stack.gatewayUrl, k.key).call("GET", "/v1/jobs")).status).toBe(200);
    expect(await revokeApiKey(db, "other", k.id)).toBe(true);
    await new Promise((r) => setTimeout(r, 6_000)); // longer than any per-isolate key cache
    expect((await apiClient(stack.gatewayUrl, k.key).call("GET", "/v1/jobs")).status).toBe(401);
  });

  it("answers bad input with a clear error and stores nothing", async () => {
    const before = await pool.query("select count(*)::int as n from jobs");
    const cases: Array<[string | object, number, string, Record<string, string>?]> = [
      ["{not json", 400, "invalid_json"],
      [{ input: { messages: [{ role: "user", content: 42 }] } }, 400, "invalid_request"],
      [{ input: { messages: [] } }, 400, "invalid_request"],
      [{ ...userMessage("x"), tools: ["format_disk"] }, 400, "invalid_request"],
      [{ ...userMessage("x"), surprise: true }, 400, "invalid_request"],
      [JSON.stringify(userMessage("x".repeat(300 * 1024))), 413, "payload_too_large"],
      ["hello", 415, "unsupported_media_type", { "content-type": "text/plain" }],
    ];
    for (const [body, status, code, headers] of cases) {
      const r = await api.call<{ error: { code: string; message: string } }>("POST", "/v1/jobs", body, headers);
      expect(r.status, `${code}: ${JSON.stringify(r.body).slice(0, 200)}`).toBe(status);
      expect(r.body.error.code).toBe(code);
      expect(r.body.error.message.length).toBeGreaterThan(5);
      expect(JSON.stringify(r.body)).not.toMatch(/at .*\.ts:\d+/); // never a stack trace
    }
    const after = await pool.query("select count(*)::int as n from jobs");
    expect(after.rows[0].n).toBe(before.rows[0].n);
  });

  it("answers oversized bodies with 413, not a connection reset, even many at once", async () => {
    // The gateway refuses before the client finished sending; unless it reads the rest, the
    // client sees ECONNRESET instead of the answer.
    const sizes = [300 * 1024, 1024 * 1024, 3 * 1024 * 1024];
    const results = await Promise.all(
      Array.from({ length: Number(process.env.E2E_OVERSIZE_N ?? 24) }, (_, i) =>
        fetch(`${stack.gatewayUrl}/v1/jobs`, {
          method: "POST",
          headers: { authorization: `Bearer ${stack.apiKey}`, "content-type": "application/json" },
          body: JSON.stringify(userMessage("x".repeat(sizes[i % sizes.length] as number))),
        }).then(
          (r) => r.status,
          (e: Error) => `${e.message}: ${String((e.cause as Error | undefined)?.message)}`,
        ),
      ),
    );
    expect(results).toEqual(results.map(() => 413));
    // A slow sender: the answer is ready long before the last byte is written.
    const slow = await new Promise<number | string>((resolve) => {
      const url = new URL(`${stack.gatewayUrl}/v1/jobs`);
      const size = 600 * 1024;
      const req = httpRequest(
        {
          host: url.hostname,
          port: url.port,
          path: url.pathname,
          method: "POST",
          headers: {
            authorization: `Bearer ${stack.apiKey}`,
            "content-type": "application/json",
            "content-length": size,
          },
        },
        (res) => {
          res.resume();
          resolve(res.statusCode ?? 0);
        },
      );
      req.on("error", (e) => resolve(e.message));
      let sent = 0;
      const timer = setInterval(() => {
        const n = Math.min(64 * 1024, size - sent);
        req.write("x".repeat(n));
        sent += n;
        if (sent >= size) {
          clearInterval(timer);
          req.end();
        }
      }, 20);
    });
    expect(slow).toBe(413);
  });

  it("scopes by tenant: another tenant's job is 404 everywhere, unknown and malformed ids too", async () => {
    const mine = await api.call<JobBody>("POST", "/v1/jobs", userMessage("private"));
    const other = apiClient(stack.gatewayUrl, otherKey);
    const id = mine.body.job.id;
    for (const path of [`/v1/jobs/${id}`, `/v1/jobs/${id}/events`]) {
      const r = await other.call("GET", path);
      expect(r.status).toBe(404);
      expect(r.body).toMatchObject({ error: { code: "not_found" } });
      expect(JSON.stringify(r.body)).not.toContain("private");
    }
    const list = await other.call<{ jobs: Array<{ id: string }> }>("GET", "/v1/jobs?limit=100");
    expect(list.body.jobs.map((j) => j.id)).not.toContain(id);
    expect((await api.call("GET", "/v1/jobs/00000000-0000-4000-8000-000000000000")).status).toBe(404);
    expect((await api.call("GET", "/v1/jobs/not-a-uuid")).status).toBe(404);
    expect((await api.call("GET", "/v1/nowhere")).status).toBe(404);
  });

  it("returns the same job for the same idempotency key (202 then 200), per tenant", async () => {
    const body = { ...userMessage("once"), idempotency_key: "idem-1" };
    const a = await api.call<JobBody>("POST", "/v1/jobs", body);
    const b = await api.call<JobBody>("POST", "/v1/jobs", body);
    expect(a.status).toBe(202);
    expect(b.status).toBe(200);
    expect(b.body.job.id).toBe(a.body.job.id);
    const c = await apiClient(stack.gatewayUrl, otherKey).call<JobBody>("POST", "/v1/jobs", body);
    expect(c.status).toBe(202);
    expect(c.body.job.id).not.toBe(a.body.job.id);
  });

  it("unstorable text and impossible cursors are 400 through real Postgres; a reused key with another body is 409", async () => {
    const before = await pool.query("select count(*)::int as n from jobs");
    const bad = [
      userMessage("nul \u0000 here"),
      userMessage("lone \ud800 surrogate"),
      { ...userMessage("x"), model: "m\u0000" },
      { ...userMessage("x"), idempotency_key: "k\u0000" },
      { ...userMessage("x"), metadata: { deep: [{ v: "\udc00" }] } },
      { ...userMessage("x"), metadata: { "k\u0000": 1 } },
    ];
    for (const body of bad) {
      const r = await api.call<{ error: { code: string } }>("POST", "/v1/jobs", body);
      expect(r.status, JSON.stringify(r.body)).toBe(400);
      expect(r.body.error.code).toBe("invalid_request");
    }
    expect((await pool.query("select count(*)::int as n from jobs")).rows[0].n).toBe(before.rows[0].n);

    const cursor = btoa(JSON.stringify(["2026-02-31T00:00:00.000000Z", crypto.randomUUID()])).replace(/=+$/, "");
    const list = await api.call<{ error: { code: string } }>("GET", `/v1/jobs?cursor=${cursor}`);
    expect(list.status).toBe(400);

    const first = await api.call<JobBody>("POST", "/v1/jobs", { ...userMessage("one"), idempotency_key: "idem-bind" });
    expect(first.status).toBe(202);
    const other = await api.call<{ error: { code: string } }>("POST", "/v1/jobs", {
      ...userMessage("two"),
      idempotency_key: "idem-bind",
    });
    expect(other.status).toBe(409);
    expect(other.body.error.code).toBe("idempotency_mismatch");

    const id = first.body.job.id;
    const input = await api.call("POST", `/v1/jobs/${id}/input`, { content: "more", idempotency_key: "in-1" });
    expect([200, 202]).toContain(input.status);
    const nul = await api.call("POST", `/v1/jobs/${id}/input`, { content: "a\u0000b" });
    expect(nul.status).toBe(400);
    const mismatch = await api.call<{ error: { code: string } }>("POST", `/v1/jobs/${id}/input`, {
      content: "different",
      idempotency_key: "in-1",
    });
    expect(mismatch.status).toBe(409);
    expect(mismatch.body.error.code).toBe("idempotency_mismatch");

    // An API key in the URL is refused on every route (with an Upgrade header too:
    // test/workers/trust-input.test.ts; Node's fetch will not send one).
    const viaUrl = await apiClient(stack.gatewayUrl, null).call("GET", `/v1/jobs/${id}?token=${stack.apiKey}`);
    expect(viaUrl.status).toBe(401);
  });

  it("lists jobs newest first with a cursor that never skips or repeats", async () => {
    const db = drizzle(pool, { schema });
    await createTenant(db, "lister");
    const lister = apiClient(stack.gatewayUrl, (await createApiKey(db, "lister")).key);
    const ids: string[] = [];
    for (let i = 0; i < 7; i++)
      ids.push((await lister.call<JobBody>("POST", "/v1/jobs", userMessage(`n${i}`))).body.job.id);
    const seen: string[] = [];
    let cursor: string | null = null;
    do {
      const q: string = cursor ? `&cursor=${encodeURIComponent(cursor)}` : "";
      const r = await lister.call<{ jobs: Array<{ id: string }>; next_cursor: string | null }>(
        "GET",
        `/v1/jobs?limit=3${q}`,
      );
      expect(r.status).toBe(200);
      seen.push(...r.body.jobs.map((j) => j.id));
      cursor = r.body.next_cursor;
    } while (cursor);
    expect(seen).toEqual([...ids].reverse());
    expect((await lister.call("GET", "/v1/jobs?cursor=garbage")).status).toBe(400);
    expect((await lister.call("GET", "/v1/jobs?limit=1000")).status).toBe(400);
  });

  it("reports health and readiness", async () => {
    expect((await fetch(`${stack.gatewayUrl}/healthz`)).status).toBe(200);
    expect((await fetch(`${stack.gatewayUrl}/readyz`)).status).toBe(200);
    const metrics = await (await fetch(stack.hosts[0]?.metricsUrl as string)).text();
    expect(metrics).toContain("event_loop_lag_seconds");
  });

  it("rejects forged and replayed ingest batches with nothing written", async () => {
    const submit = await api.call<JobBody>("POST", "/v1/jobs", userMessage("ingest target"));
    const job = await waitTerminal(submit.body.job.id);
    const before = await api.events(job.id);
    const batch = JSON.stringify({
      job_id: job.id,
      events: [
        {
          job_id: job.id,
          execution_id: "00000000-0000-4000-8000-000000000001",
          epoch: 99,
          seq: 1,
          type: "model.delta",
          payload: { text: "forged" },
          ts: new Date().toISOString(),
        },
      ],
    });
    const r1 = await fetch(`${stack.gatewayUrl}/internal/events`, {
      method: "POST",
      headers: await signedHeaders("not-the-secret", "POST", "/internal/events", batch),
      body: batch,
    });
    expect(r1.status).toBe(401);
    const after = await api.events(job.id);
    expect(after.map((e) => e.data)).toEqual(before.map((e) => e.data));
  });

  it("measures submit → first event and submit → completed (median of 20)", async () => {
    const firstEvent: number[] = [];
    const completed: number[] = [];
    for (let i = 0; i < 20; i++) {
      const t0 = performance.now();
      const { job } = await client.submit(userMessage(`timing run ${i}`));
      let first = 0;
      let last = "";
      for await (const { event } of client.events(job.id)) {
        if (!first) first = performance.now();
        last = event.type;
      }
      expect(last).toBe("run.completed");
      completed.push(performance.now() - t0);
      firstEvent.push(first - t0);
    }
    const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)] as number;
    console.log(
      `[e2e figures] over 20 jobs (mock ttft 5 ms, 2000 tokens/s): submit→first event median ${median(firstEvent).toFixed(1)} ms, submit→completed median ${median(completed).toFixed(1)} ms`,
    );
    expect(firstEvent.every((t) => t > 0)).toBe(true);
  });
});
