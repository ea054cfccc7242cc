/**
 * The per-tenant stream counter (tenant-streams-object.ts) and its SSE holder (JobEvents), in workerd:
 * leases expire when their holder stops renewing (a crashed or evicted holder never leaks a slot
 * for longer than the TTL), renewals keep them, and the job's stream is refused with 429 before it
 * opens once the tenant is at its cap.
 */
import { describe, expect, it } from "vitest";
import { sleep } from "../../../../src/domain/async";
import {
  acquireStreamSlotJoined,
  tenantStreams,
} from "../../../../workers/durable-objects/tenant-streams/stream-leases";
import { batch, envelope, ingest, newJob, SseReader, testEnv } from "../../helpers";

describe("tenant stream leases", () => {
  it("refuses past the cap; a lease nobody renews stops counting at expiry", async () => {
    const t = tenantStreams(testEnv, `t-${crypto.randomUUID()}`);
    expect(await t.acquire("a", "sse", 2, 300)).toEqual({ ok: true });
    expect(await t.acquire("b", "ws", 2, 300)).toEqual({ ok: true });
    expect(await t.acquire("c", "sse", 2, 300)).toEqual({ ok: false, open: 2 });
    // The holders of a and b "crash": no renewal, no release.
    await sleep(400);
    expect(await t.acquire("c", "sse", 2, 300)).toEqual({ ok: true });
    expect(await t.count()).toEqual({ sse: 1, ws: 0 });
  });

  it("renewal keeps a lease past its first expiry; a lease already gone is not brought back", async () => {
    const t = tenantStreams(testEnv, `t-${crypto.randomUUID()}`);
    await t.acquire("kept", "sse", 1, 300);
    for (let i = 0; i < 3; i++) {
      await sleep(150);
      await t.renew(["kept"], 300);
    }
    expect(await t.acquire("other", "sse", 1, 300)).toEqual({ ok: false, open: 1 });
    await t.release(["kept"]);
    await t.renew(["kept"], 300); // a renewal racing the release
    expect(await t.acquire("other", "sse", 1, 300)).toEqual({ ok: true });
  });
});

describe("SSE streams counted per tenant", () => {
  const open = (stub: ReturnType<typeof newJob>["stub"], tenant: string, cap: number) =>
    stub.fetch(`https://job-events/events?after=0&job_id=x&tenant_id=${tenant}&stream_cap=${cap}`);

  it("refuses a stream past the cap with 429 before subscribing; a closed stream frees its slot", async () => {
    const tenant = `t-${crypto.randomUUID()}`;
    const jobA = newJob();
    const jobB = newJob();
    const first = await open(jobA.stub, tenant, 2);
    const second = await open(jobB.stub, tenant, 2);
    expect([first.status, second.status]).toEqual([200, 200]);
    const refused = await open(jobB.stub, tenant, 2);
    expect(refused.status).toBe(429);
    expect(refused.headers.get("retry-after")).toMatch(/^[1-9]\d*$/);
    expect(await refused.json()).toMatchObject({ error: { code: "rate_limited" } });

    // The client goes away: the next keepalive write fails (SSE_HEARTBEAT_MS = 200) and releases.
    await first.body?.cancel();
    let reopened: Response | null = null;
    for (let i = 0; i < 20 && reopened === null; i++) {
      await sleep(100);
      const r = await open(jobB.stub, tenant, 2);
      if (r.status === 200) reopened = r;
    }
    expect(reopened?.status).toBe(200);
    await reopened?.body?.cancel();
    await second.body?.cancel();
  });

  it("a finished job's replay takes no slot, and the terminal event releases every subscriber's", async () => {
    const tenant = `t-${crypto.randomUUID()}`;
    const { jobId, stub } = newJob();
    const live = new SseReader(await open(stub, tenant, 1));
    expect((await open(stub, tenant, 1)).status).toBe(429);
    const exec = crypto.randomUUID();
    await ingest(stub, batch(jobId, exec, 1, [1]));
    await ingest(stub, {
      job_id: jobId,
      events: [envelope(jobId, exec, 1, 2, "run.completed", { output: "done" })],
    });
    expect((await live.rest()).map((e) => e.event)).toEqual(["model.delta", "run.completed"]);
    // The release is sent as the streams close; give it its round trip.
    const counter = tenantStreams(testEnv, tenant);
    for (let i = 0; i < 20 && (await counter.count()).sse > 0; i++) await sleep(50);
    expect(await counter.count()).toEqual({ sse: 0, ws: 0 });
    const replay = await open(stub, tenant, 1);
    expect(replay.status).toBe(200);
    expect(await tenantStreams(testEnv, tenant).count()).toEqual({ sse: 0, ws: 0 });
    await replay.body?.cancel();
  });
});

describe("stream opens joined into one counter call", () => {
  it("acquireMany grants in order up to the cap, and a retried id counts once", async () => {
    const t = tenantStreams(testEnv, `t-${crypto.randomUUID()}`);
    expect(await t.acquire("held", "sse", 3, 5_000)).toEqual({ ok: true });
    expect(await t.acquireMany(["a", "b", "c", "d"], "sse", 3, 5_000)).toEqual({ granted: ["a", "b"], open: 3 });
    // A call retried with ids that already hold their lease changes nothing in the count.
    expect(await t.acquireMany(["a", "b"], "sse", 3, 5_000)).toEqual({ granted: ["a", "b"], open: 3 });
    expect(await t.count()).toEqual({ sse: 3, ws: 0 });
  });

  it("a burst of opens is one or two calls and never passes the cap", async () => {
    const tenant = `t-${crypto.randomUUID()}`;
    const kept: Array<Promise<unknown>> = [];
    const verdicts = await Promise.all(
      Array.from({ length: 24 }, () =>
        acquireStreamSlotJoined(testEnv, tenant, "sse", 6, (work) => {
          kept.push(work);
        }),
      ),
    );
    await Promise.all(kept);
    const granted = verdicts.filter((v) => typeof v === "string");
    const refused = verdicts.filter((v) => v instanceof Response) as Response[];
    expect(granted).toHaveLength(6);
    expect(refused).toHaveLength(18);
    expect(refused.every((r) => r.status === 429)).toBe(true);
    // Each call that carried opens was handed to keepAlive: the first open's, then the rest's.
    expect(kept.length).toBeLessThanOrEqual(2);
    expect(await tenantStreams(testEnv, tenant).count()).toEqual({ sse: 6, ws: 0 });
  });

  it("the object holds a lease the gateway handed over, and releases it when it does not subscribe", async () => {
    const tenant = `t-${crypto.randomUUID()}`;
    const counter = tenantStreams(testEnv, tenant);
    const { jobId, stub } = newJob();
    expect((await counter.acquireMany(["sse:live"], "sse", 5)).granted).toEqual(["sse:live"]);
    const live = new SseReader(
      await stub.fetch(`https://job-events/events?after=0&job_id=${jobId}&tenant_id=${tenant}&lease=sse:live`),
    );
    const exec = crypto.randomUUID();
    await ingest(stub, {
      job_id: jobId,
      events: [envelope(jobId, exec, 1, 1, "run.completed", { output: "done" })],
    });
    expect((await live.rest()).map((e) => e.event)).toEqual(["run.completed"]);
    for (let i = 0; i < 20 && (await counter.count()).sse > 0; i++) await sleep(50);
    expect(await counter.count()).toEqual({ sse: 0, ws: 0 });
    // A finished job with nothing after the cursor: 204, and the handed-over lease goes back.
    expect((await counter.acquireMany(["sse:late"], "sse", 5)).granted).toEqual(["sse:late"]);
    const done = await stub.fetch(
      `https://job-events/events?after=1&job_id=${jobId}&tenant_id=${tenant}&lease=sse:late`,
    );
    expect(done.status).toBe(204);
    for (let i = 0; i < 20 && (await counter.count()).sse > 0; i++) await sleep(50);
    expect(await counter.count()).toEqual({ sse: 0, ws: 0 });
  });
});
