/**
 * Cancellation and input: durable first, hint
 * second, honest statuses. DB-level cases on a template-cloned database; the rest end to end
 * through the real gateway, Redis, Postgres, mock model and a host process.
 */
import { randomUUID } from "node:crypto";
import { eq } from "drizzle-orm";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { EventOf } from "../../src/contracts/events";
import { requestCancel, submitInput } from "../../src/db/control-repo";
import { cancelClaim } from "../../src/db/ownership-repo";
import { releaseStaleClaims } from "../../src/db/reaper-repo";
import { jobs } from "../../src/db/schema";
import { claimJob, markStarted } from "../../tools/lib/single-row-writes";
import { readSse, type SseEvent } from "../../tools/lib/sse";
import { type Stack, startStack } from "../../tools/stack/start";
import { apiClient, userMessage } from "../helpers/api";
import type { TestDb } from "../helpers/db";
import { newJob, postgresTest } from "../helpers/postgres-fixture";
import { requireBinary } from "../helpers/require";

const canRun = await requireBinary("redis-server", "apt-get install redis-server");

// File-scoped fixtures are declared at the top level; only the first describe takes them.
const test = postgresTest({ tenants: ["t1", "t2"] });

describe("cancel in Postgres (durable half)", () => {
  let t: TestDb;
  test.beforeAll(({ testDb }) => {
    t = testDb;
  });

  const state = async (id: string) => (await t.db.select().from(jobs).where(eq(jobs.id, id)))[0];

  it("cancels a queued, unclaimed job at once and says so; repeats answer already_finished", async () => {
    const id = await newJob(t.db);
    expect(await requestCancel(t.db, "t1", id)).toBe("cancelled");
    expect((await state(id))?.state).toBe("cancelled");
    expect(await requestCancel(t.db, "t1", id)).toBe("already_finished");
    expect(await claimJob(t.db, id, "h", randomUUID())).toBeNull();
  });

  it("another tenant's or an unknown job is not_found and untouched", async () => {
    const id = await newJob(t.db);
    expect(await requestCancel(t.db, "t2", id)).toBe("not_found");
    expect(await requestCancel(t.db, "t1", randomUUID())).toBe("not_found");
    expect(await requestCancel(t.db, "t1", "not-a-uuid")).toBe("not_found");
    expect((await state(id))?.state).toBe("queued");
  });

  it("a claimed job whose cancel was requested never starts; its claimant ends it cancelled", async () => {
    const id = await newJob(t.db);
    const token = randomUUID();
    const epoch = (await claimJob(t.db, id, "h", token)) as number;
    expect(await requestCancel(t.db, "t1", id)).toBe("requested");
    const claim = { jobId: id, host: "h", epoch, token };
    expect(await markStarted(t.db, { ...claim, executionId: randomUUID() })).toBe(false);
    expect(await cancelClaim(t.db, claim)).toBe(true);
    expect((await state(id))?.state).toBe("cancelled");
  });

  it("a stale claim with a cancel request is cancelled by the reaper, not re-queued", async () => {
    const id = await newJob(t.db);
    await claimJob(t.db, id, "dead-host", randomUUID());
    expect(await requestCancel(t.db, "t1", id)).toBe("requested");
    await new Promise((r) => setTimeout(r, 5));
    const requeued = await releaseStaleClaims(t.db, 1);
    expect(requeued.map((r) => r.id)).not.toContain(id);
    expect((await state(id))?.state).toBe("cancelled");
  });

  it("concurrent cancels of one queued job: exactly one 'cancelled', the rest already_finished", async () => {
    const id = await newJob(t.db);
    const results = await Promise.all(Array.from({ length: 8 }, () => requestCancel(t.db, "t1", id)));
    expect(results.filter((r) => r === "cancelled")).toHaveLength(1);
    expect(results.filter((r) => r === "already_finished")).toHaveLength(7);
  });

  it("input: idempotent by key, ordered, already_finished once the job ended", async () => {
    const id = await newJob(t.db);
    const a = await submitInput(t.db, "t1", id, "first", "k1");
    const again = await submitInput(t.db, "t1", id, "first", "k1");
    expect(again).toMatchObject({ inputId: a?.inputId, created: false });
    // The key names that one input: other content under it is a mismatch, not the old input.
    await expect(submitInput(t.db, "t1", id, "first (edited)", "k1")).rejects.toMatchObject({
      code: "idempotency_mismatch",
    });
    const concurrent = await Promise.all(["x", "y", "z"].map((c) => submitInput(t.db, "t1", id, c, null)));
    expect(new Set(concurrent.map((r) => r?.inputId)).size).toBe(3);
    expect(await submitInput(t.db, "t2", id, "not yours", null)).toBeNull();
    await requestCancel(t.db, "t1", id);
    const late = await submitInput(t.db, "t1", id, "too late", null);
    expect(late?.status).toBe("already_finished");
  });
});

describe.skipIf(!canRun)("cancel and input end to end", () => {
  let stack: Stack;
  let api: ReturnType<typeof apiClient>;
  const auth = () => ({ authorization: `Bearer ${stack.apiKey}` });
  const slow = (tokens: number, tps = 20) =>
    userMessage(`!mock ${JSON.stringify({ tokens, tokens_per_s: tps, ttft_ms: 10 })}`);

  beforeAll(async () => {
    // LISTEN off: this suite measures the hint poll and the durable poll; the wake-up through
    // Postgres (LISTEN ear_cancel) has its own suite below, with both polls made too slow to help.
    stack = await startStack({ hosts: 1, hostEnv: { HOST_MAX_RUNS: "4", HOST_LISTEN: "false" } });
    api = apiClient(stack.gatewayUrl, stack.apiKey);
  }, 180_000);
  afterAll(async () => {
    await stack?.stop();
    // The stack stops the redis-server it started; the one restarted below is ours to stop.
    await stack?.redis?.stop();
  }, 60_000);

  async function getJob(id: string) {
    return (await api.call<{ job: { state: string; output: string | null } }>("GET", `/v1/jobs/${id}`)).body.job;
  }

  /** Submit, wait until the stream has a model.delta, return the job id and the open stream. */
  async function runningJob(body: object) {
    const submit = await api.call<{ job: { id: string } }>("POST", "/v1/jobs", body);
    const id = submit.body.job.id;
    const events: SseEvent[] = [];
    const it = readSse(`${stack.gatewayUrl}/v1/jobs/${id}/events`, {
      headers: auth(),
      signal: AbortSignal.timeout(30_000),
    });
    // next() by hand: breaking out of for-await would call return() and close the stream.
    for (;;) {
      const r = await it.next();
      if (r.done) break;
      events.push(r.value);
      if (r.value.event === "model.delta") break;
    }
    const rest = (async () => {
      for (;;) {
        const r = await it.next();
        if (r.done) return events;
        events.push(r.value);
      }
    })();
    return { id, events, rest };
  }

  async function waitState(id: string, want: string, timeoutMs = 10_000): Promise<number> {
    const t0 = performance.now();
    for (;;) {
      if ((await getJob(id)).state === want) return performance.now() - t0;
      if (performance.now() - t0 > timeoutMs) throw new Error(`job ${id} not ${want} after ${timeoutMs} ms`);
      await new Promise((r) => setTimeout(r, 20));
    }
  }

  it("cancels mid model stream: cancelled, cancel.accepted then run.cancelled last, nothing after", async () => {
    const { id, rest } = await runningJob(slow(200));
    const t0 = performance.now();
    const r = await api.call<{ status: string }>("POST", `/v1/jobs/${id}/cancel`);
    expect(r.status).toBe(202);
    expect(r.body.status).toBe("requested");
    await waitState(id, "cancelled");
    const convergence = performance.now() - t0;
    const events = await rest;
    const types = events.map((e) => e.event);
    expect(types.at(-1)).toBe("run.cancelled");
    expect(types.at(-2)).toBe("cancel.accepted");
    expect(types.filter((t) => t.startsWith("run.") && !["run.started", "run.prepared"].includes(t))).toEqual([
      "run.cancelled",
    ]);
    const job = await getJob(id);
    expect(job.output?.length ?? 0).toBeLessThan(200 * 3);
    console.log(`[cancel] API call → durable cancelled: ${convergence.toFixed(0)} ms (hint path)`);
    expect((await api.call<{ status: string }>("POST", `/v1/jobs/${id}/cancel`)).body.status).toBe("already_finished");
    // The host that converged it observed cancel_requested_at → terminal write.
    const counts = await Promise.all(
      stack.hosts.map(async (h) => {
        const text = await (await fetch(h.metricsUrl)).text().catch(() => "");
        const m = text.match(/^cancel_convergence_seconds_count\{[^}]*outcome="cancelled"[^}]*\} (\d+)/m);
        return Number(m?.[1] ?? 0);
      }),
    );
    expect(counts.reduce((a, b) => a + b, 0)).toBeGreaterThanOrEqual(1);
  });

  it("repeated and concurrent cancels of a running job are idempotent", async () => {
    const { id, rest } = await runningJob(slow(200));
    const results = await Promise.all(
      Array.from({ length: 5 }, () => api.call<{ status: string }>("POST", `/v1/jobs/${id}/cancel`)),
    );
    for (const r of results) expect(["requested", "already_finished"]).toContain(r.body.status);
    await waitState(id, "cancelled");
    const types = (await rest).map((e) => e.event);
    expect(types.filter((t) => t === "run.cancelled")).toHaveLength(1);
    expect(types.filter((t) => t === "cancel.accepted")).toHaveLength(1);
  });

  it("a finished job answers already_finished; unknown and other tenants' jobs 404", async () => {
    const submit = await api.call<{ job: { id: string } }>("POST", "/v1/jobs", userMessage("quick"));
    await waitState(submit.body.job.id, "completed");
    expect((await api.call<{ status: string }>("POST", `/v1/jobs/${submit.body.job.id}/cancel`)).body.status).toBe(
      "already_finished",
    );
    expect((await api.call("POST", `/v1/jobs/${randomUUID()}/cancel`)).status).toBe(404);
    expect((await api.call("POST", "/v1/jobs/nope/cancel")).status).toBe(404);
  });

  it("with Redis stopped, the durable path still converges within about 1.5 s", async () => {
    const { id, rest } = await runningJob(slow(300, 20));
    await stack.redis?.stop();
    try {
      const t0 = performance.now();
      const r = await api.call<{ status: string }>("POST", `/v1/jobs/${id}/cancel`);
      expect(r.body.status).toBe("requested");
      await waitState(id, "cancelled", 5000);
      const convergence = performance.now() - t0;
      console.log(`[cancel] Redis stopped: API call → durable cancelled in ${convergence.toFixed(0)} ms`);
      expect(convergence).toBeLessThan(2500);
      expect((await rest).map((e) => e.event).at(-1)).toBe("run.cancelled");
    } finally {
      const { startRedis } = await import("../../tools/stack/services/redis");
      // Same port, so the bridge reconnects and later tests have Redis again.
      const port = Number(new URL(stack.redisUrl as string).port);
      const restarted = await startRedis({ port });
      (stack as { redis: unknown }).redis = restarted;
    }
  });

  it("applies input at the next model turn: statuses requested → accepted → applied, in order", async () => {
    const { id, rest } = await runningJob(slow(40, 40));
    const first = await api.call<{ input_id: string; status: string }>("POST", `/v1/jobs/${id}/input`, {
      content: "second question",
      idempotency_key: "in-1",
    });
    expect(first.status).toBe(202);
    expect(first.body.status).toBe("requested");
    const dup = await api.call<{ input_id: string }>("POST", `/v1/jobs/${id}/input`, {
      content: "second question",
      idempotency_key: "in-1",
    });
    expect(dup.status).toBe(200);
    expect(dup.body.input_id).toBe(first.body.input_id);
    const second = await api.call<{ input_id: string }>("POST", `/v1/jobs/${id}/input`, { content: "third question" });
    await waitState(id, "completed", 20_000);
    const events = await rest;
    const accepted = events
      .filter((e) => e.event === "input.accepted")
      .map((e) => (JSON.parse(e.data) as EventOf<"input.accepted">).payload.input_id);
    expect(accepted).toEqual([first.body.input_id, second.body.input_id]);
    const inputs = await api.call<{ inputs: Array<{ input_id: string; status: string }> }>(
      "GET",
      `/v1/jobs/${id}/inputs`,
    );
    expect(inputs.body.inputs.map((i) => [i.input_id, i.status])).toEqual([
      [first.body.input_id, "applied"],
      [second.body.input_id, "applied"],
    ]);
    // The mock answers the last user message: the final turn saw the input.
    expect((await getJob(id)).output).toBe("Echo: third question");
    const late = await api.call<{ status: string }>("POST", `/v1/jobs/${id}/input`, { content: "after the end" });
    expect(late.body.status).toBe("already_finished");
    expect((await api.call("POST", `/v1/jobs/${id}/input`, { content: 5 })).status).toBe(400);
  });
});

describe.skipIf(!canRun)("cancel wake-up through Postgres (LISTEN ear_cancel)", () => {
  let stack: Stack;
  let api: ReturnType<typeof apiClient>;

  beforeAll(async () => {
    // Both polls a minute apart: a cancel seen within seconds was seen through the notification.
    stack = await startStack({
      hosts: 1,
      hostEnv: { HOST_MAX_RUNS: "4", HOST_CANCEL_HINT_MS: "60000", HOST_CANCEL_DURABLE_MS: "60000" },
    });
    api = apiClient(stack.gatewayUrl, stack.apiKey);
  }, 180_000);
  afterAll(async () => {
    await stack?.stop();
  }, 60_000);

  it("the owner sees a cancel at once, through the trigger's notification, not a poll", async () => {
    const body = userMessage(`!mock ${JSON.stringify({ tokens: 400, tokens_per_s: 20, ttft_ms: 10 })}`);
    const submit = await api.call<{ job: { id: string } }>("POST", "/v1/jobs", body);
    const id = submit.body.job.id;
    const events: SseEvent[] = [];
    let convergenceMs: number | null = null;
    for await (const ev of readSse(`${stack.gatewayUrl}/v1/jobs/${id}/events`, {
      headers: { authorization: `Bearer ${stack.apiKey}` },
      signal: AbortSignal.timeout(30_000),
    })) {
      events.push(ev);
      if (ev.event !== "model.delta" || convergenceMs !== null) continue;
      // Mid model stream: cancel, then time it until Postgres says cancelled.
      const t0 = performance.now();
      const r = await api.call<{ status: string }>("POST", `/v1/jobs/${id}/cancel`);
      expect(r.body.status).toBe("requested");
      while ((await api.call<{ job: { state: string } }>("GET", `/v1/jobs/${id}`)).body.job.state !== "cancelled") {
        expect(performance.now() - t0).toBeLessThan(5000);
        await new Promise((res) => setTimeout(res, 20));
      }
      convergenceMs = performance.now() - t0;
      console.log(`[cancel] LISTEN ear_cancel: API call → durable cancelled in ${convergenceMs.toFixed(0)} ms`);
    }
    expect(convergenceMs).not.toBeNull();
    const accepted = events.find((e) => e.event === "cancel.accepted");
    expect(accepted).toBeDefined();
    expect((JSON.parse(accepted!.data) as EventOf<"cancel.accepted">).payload.via).toBe("durable");
    expect(events.at(-1)?.event).toBe("run.cancelled");
  });
});
