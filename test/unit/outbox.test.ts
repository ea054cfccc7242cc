/**
 * The host outbox's request discipline, with the gateway replaced by a scripted fetch (the real
 * path, through workerd, is covered by the integration and workers suites): one request carries
 * every due execution, an execution never has two batches in flight, a batch always restarts at
 * `acked_seq + 1`, and one execution's failure or rejection never touches the others.
 */
import { describe, expect, it } from "vitest";
import { silentLogger } from "../../sandbox-host/log";
import {
  type ExecutionRef,
  MERGED_DELTA_MAX_CHARS,
  Outbox,
  type OutboxOptions,
} from "../../sandbox-host/outbox/outbox";

/** The claim token the test executions started under (their batches' macs derive from it). */
const TOKEN = "00000000-0000-4000-8000-000000000001";

import { type EventEnvelope, INTERNAL_HEADERS, MAX_EVENT_PAYLOAD_BYTES } from "../../src/contracts/events";
import { sleep } from "../../src/domain/async";

/** Polls `cond` every 5 ms for up to 5 s. */
async function until(cond: () => boolean, ms = 5_000): Promise<void> {
  const end = Date.now() + ms;
  while (!cond() && Date.now() < end) await sleep(5);
}

import { deriveIngestKey, verifyBatchMac } from "../../src/domain/signing";

type Batch = { job_id: string; events: EventEnvelope[] };
type Answered = { status: number; body: { results: Array<Record<string, unknown>> } };
type Answer = { status: number; body: unknown } | Error;

/** A fetch that records each request's batches and answers with what the test decides. */
function scriptedGateway(answer: (batches: Batch[]) => Answer | Promise<Answer>) {
  const requests: Batch[][] = [];
  const fetch = (async (_url: unknown, init?: RequestInit) => {
    const { batches } = JSON.parse(String(init?.body)) as { batches: Batch[] };
    requests.push(batches);
    const a = await answer(batches);
    if (a instanceof Error) throw a;
    return new Response(JSON.stringify(a.body), { status: a.status });
  }) as typeof globalThis.fetch;
  return { fetch, requests };
}

const ackAll = (batches: Batch[]): Answered => ({
  status: 200,
  body: {
    results: batches.map((b) => ({
      job_id: b.job_id,
      status: 200,
      ack: { acked_seq: b.events[b.events.length - 1]?.seq ?? 0, accepted: b.events.length, duplicates: 0 },
    })),
  },
});

/** Every batch acknowledged except `jobId`'s, which gets `result` instead. */
function ackAllBut(batches: Batch[], jobId: string, result: Record<string, unknown>): Answered {
  const answer = ackAll(batches);
  const i = batches.findIndex((b) => b.job_id === jobId);
  if (i >= 0) answer.body.results[i] = { job_id: jobId, ...result };
  return answer;
}

function outbox(fetch: typeof globalThis.fetch, opts: Partial<OutboxOptions> = {}) {
  return new Outbox({
    gatewayUrl: "http://gateway.test",
    signingSecret: "unit-test-secret-unit-test-secret",
    log: silentLogger,
    fetch,
    flushDelayMs: 5,
    retry: { baseMs: 20, maxMs: 40 },
    ...opts,
  });
}

/** Two executions: `run.started` on both, one delta more on the second, both ended. */
function twoEndedStreams(box: Outbox, first: ExecutionRef, second: ExecutionRef) {
  const a = box.open(first);
  const b = box.open(second);
  a.emit("run.started", {});
  b.emit("run.started", {});
  b.emit("model.delta", { text: "y" });
  a.end();
  b.end();
  return [a, b] as const;
}

const seqs = (b: Batch | undefined) => b?.events.map((e) => e.seq);

describe("outbox: one request per flush for the whole host", () => {
  it("sends the due events of several executions in one request, each in seq order", async () => {
    const gw = scriptedGateway(ackAll);
    const box = outbox(gw.fetch);
    const streams = ["j1", "j2", "j3"].map((j) =>
      box.open({ jobId: j, executionId: `e-${j}`, epoch: 1, token: TOKEN }),
    );
    for (const s of streams) {
      s.emit("model.turn", { turn: 1, reason: "start" });
      s.emit("model.delta", { text: "b" });
    }
    expect(await box.drain(1000)).toBe(false); // streams are not ended: drain waits for end()
    expect(gw.requests).toHaveLength(1);
    expect(gw.requests[0]?.map((b) => [b.job_id, seqs(b)])).toEqual([
      ["j1", [1, 2]],
      ["j2", [1, 2]],
      ["j3", [1, 2]],
    ]);
    expect(box.pendingEvents).toBe(0);
    for (const s of streams) s.end();
    expect(await box.drain(1000)).toBe(true);
  });

  it("macs each batch with its execution's ingest key over the request's nonce and the events' exact JSON", async () => {
    let seen: { body: string; nonce: string } | undefined;
    const fetch = (async (_url: unknown, init?: RequestInit) => {
      const headers = init?.headers as Record<string, string>;
      seen = { body: String(init?.body), nonce: headers[INTERNAL_HEADERS.nonce] as string };
      const { batches } = JSON.parse(seen.body) as { batches: Batch[] };
      return new Response(JSON.stringify(ackAll(batches).body), { status: 200 });
    }) as typeof globalThis.fetch;
    const box = outbox(fetch);
    const other = "00000000-0000-4000-8000-000000000002";
    const a = box.open({ jobId: "ja", executionId: "ea", epoch: 1, token: TOKEN });
    const b = box.open({ jobId: "jb", executionId: "eb", epoch: 1, token: other });
    a.emit("model.delta", { text: '\ud800 \u00e9 "quoted"', 10: "integer-like key", n: 0.1 + 0.2 });
    b.emit("run.started", {});
    a.end();
    b.end();
    expect(await box.drain(1000)).toBe(true);
    const { body, nonce } = seen as { body: string; nonce: string };
    const { batches } = JSON.parse(body) as { batches: Array<Batch & { mac: string }> };
    const [ba, bb] = batches as [Batch & { mac: string }, Batch & { mac: string }];
    // What the gateway does: stringify the parsed events, verify under the key from Postgres' token.
    const verify = async (x: Batch & { mac: string }, token: string, exec: string) =>
      verifyBatchMac(await deriveIngestKey(token, exec), nonce, x.job_id, JSON.stringify(x.events), x.mac);
    expect(await verify(ba, TOKEN, "ea")).toBe(true);
    expect(await verify(bb, other, "eb")).toBe(true);
    expect(await verify(ba, other, "ea")).toBe(false);
  });

  it("never has two batches of one execution in flight; what arrived meanwhile goes next", async () => {
    let release: () => void = () => {};
    let first = true;
    const gw = scriptedGateway(async (batches) => {
      if (first) {
        first = false;
        await new Promise<void>((r) => (release = r));
      }
      return ackAll(batches);
    });
    const box = outbox(gw.fetch);
    const a = box.open({ jobId: "ja", executionId: "ea", epoch: 1, token: TOKEN });
    a.emit("model.delta", { text: "1" });
    // Waits for what must happen (a busy machine can take longer than a fixed sleep), then a
    // little more for what must not.
    await until(() => gw.requests.length >= 1);
    expect(gw.requests).toHaveLength(1);
    a.emit("model.delta", { text: "2" });
    a.emit("model.delta", { text: "3" });
    const b = box.open({ jobId: "jb", executionId: "eb", epoch: 1, token: TOKEN });
    b.emit("model.delta", { text: "x" });
    await until(() => gw.requests.length >= 2);
    await sleep(30);
    // b is free to go while a's first batch is held; a's new events wait for a's answer.
    expect(gw.requests.map((r) => r.map((x) => x.job_id))).toEqual([["ja"], ["jb"]]);
    release();
    await until(() => gw.requests.length >= 3);
    // The two deltas that waited behind the batch in flight went as one event (joined deltas).
    expect(gw.requests[2]?.map((x) => [x.job_id, seqs(x)])).toEqual([["ja", [2]]]);
    expect(gw.requests[2]?.[0]?.events[0]?.payload).toEqual({ text: "23" });
  });

  it("joins deltas waiting behind a batch in flight, never into an event a request carried", async () => {
    let release: () => void = () => {};
    let held = 0;
    const gw = scriptedGateway(async (batches) => {
      if (held++ < 2) await new Promise<void>((r) => (release = r));
      return ackAll(batches);
    });
    const box = outbox(gw.fetch);
    const a = box.open({ jobId: "ja", executionId: "ea", epoch: 1, token: TOKEN });
    a.emit("model.delta", { text: "a" });
    await sleep(30);
    // "a" is in a request now: what follows may not change it, so it starts a new event.
    a.emit("model.delta", { text: "b" });
    a.emit("model.delta", { text: "c" });
    a.emit("tool.call", { id: "t1", name: "shell", args: {} });
    a.emit("model.delta", { text: "d" });
    a.emit("model.delta", { text: "e".repeat(MERGED_DELTA_MAX_CHARS) });
    release();
    await sleep(30);
    release();
    a.end();
    expect(await box.drain(2000)).toBe(true);
    const events = gw.requests.flatMap((r) => r.flatMap((b) => b.events));
    expect(events.map((e) => [e.seq, e.type])).toEqual([
      [1, "model.delta"],
      [2, "model.delta"],
      [3, "tool.call"],
      [4, "model.delta"],
      [5, "model.delta"],
    ]);
    expect(events.map((e) => (e.payload as { text?: string }).text?.slice(0, 3))).toEqual([
      "a",
      "bc",
      undefined,
      "d",
      "eee",
    ]);
  });

  it("retries only the execution whose object was busy, from its acked seq", async () => {
    let busy = true;
    const gw = scriptedGateway((batches) => {
      if (!busy) return ackAll(batches);
      busy = false;
      return ackAllBut(batches, "j2", { status: 503, error: { code: "dependency_unavailable", message: "busy" } });
    });
    const backlog: number[] = [];
    const box = outbox(gw.fetch, { onBacklog: (n) => backlog.push(n) });
    const [, s2] = twoEndedStreams(
      box,
      { jobId: "j1", executionId: "e1", epoch: 1, token: TOKEN },
      { jobId: "j2", executionId: "e2", epoch: 1, token: TOKEN },
    );
    expect(await box.drain(2000)).toBe(true);
    expect(gw.requests.map((r) => r.map((b) => [b.job_id, seqs(b)]))).toEqual([
      [
        ["j1", [1]],
        ["j2", [1, 2]],
      ],
      [["j2", [1, 2]]],
    ]);
    expect(s2.acknowledged).toBe(2);
    expect(backlog[backlog.length - 1]).toBe(0);
  });

  it("drops only the rejected execution's events (409); a network failure retries everyone", async () => {
    let calls = 0;
    const gw = scriptedGateway((batches) => {
      calls++;
      if (calls === 1) return new Error("connection reset");
      return ackAllBut(batches, "jstale", { status: 409, error: { code: "conflict", message: "stale_epoch" } });
    });
    const box = outbox(gw.fetch);
    const [ok, stale] = twoEndedStreams(
      box,
      { jobId: "jok", executionId: "eok", epoch: 2, token: TOKEN },
      { jobId: "jstale", executionId: "est", epoch: 1, token: TOKEN },
    );
    expect(await box.drain(2000)).toBe(true);
    expect(gw.requests[0]?.map((b) => b.job_id)).toEqual(["jok", "jstale"]);
    // After the network error both were retried (each on its own backoff, maybe in one request).
    const retried = gw.requests.slice(1).flat();
    expect(retried.map((b) => b.job_id).sort()).toEqual(["jok", "jstale"]);
    expect(ok.acknowledged).toBe(1);
    expect(stale.acknowledged).toBe(0);
    expect(box.pendingEvents).toBe(0);
  });

  it("splits a flush that exceeds the per-request event bound, keeping each execution whole", async () => {
    const gw = scriptedGateway(ackAll);
    const box = outbox(gw.fetch, { maxRequestEvents: 5, maxInFlight: 1 });
    const streams = ["j1", "j2", "j3"].map((j) =>
      box.open({ jobId: j, executionId: `e-${j}`, epoch: 1, token: TOKEN }),
    );
    for (const s of streams) for (let i = 0; i < 3; i++) s.emit("model.turn", { turn: i + 1, reason: "next" });
    for (const s of streams) s.end();
    expect(await box.drain(2000)).toBe(true);
    for (const r of gw.requests) expect(r.reduce((n, b) => n + b.events.length, 0)).toBeLessThanOrEqual(5);
    const delivered = new Map<string, number[]>();
    for (const b of gw.requests.flat())
      delivered.set(b.job_id, [...(delivered.get(b.job_id) ?? []), ...(seqs(b) ?? [])]);
    expect([...delivered.entries()].sort()).toEqual([
      ["j1", [1, 2, 3]],
      ["j2", [1, 2, 3]],
      ["j3", [1, 2, 3]],
    ]);
  });
});

describe("outbox: no event and no request bigger than the event path carries", () => {
  // The gateway takes 1 MiB per request (workers/routes/internal-events.ts).
  const GATEWAY_LIMIT = 1024 * 1024;

  it("bounds a request by UTF-8 bytes, not characters: CJK deltas split over requests, none dropped", async () => {
    const sizes: number[] = [];
    const gw = scriptedGateway(ackAll);
    const box = outbox(async (url, init) => {
      sizes.push(Buffer.byteLength(String(init?.body)));
      return gw.fetch(url, init);
    });
    const s = box.open({ jobId: "j1", executionId: "e-j1", epoch: 1, token: TOKEN });
    // 200 deltas of 4,096 characters: 800 Ki characters, 2.4 MiB of UTF-8.
    for (let i = 0; i < 200; i++) s.emit("model.delta", { text: "字".repeat(4096) });
    s.end();
    expect(await box.drain(5000)).toBe(true);
    expect(Math.max(...sizes)).toBeLessThanOrEqual(GATEWAY_LIMIT);
    expect(gw.requests.flatMap((r) => r.flatMap((b) => seqs(b) ?? []))).toEqual(
      Array.from({ length: 200 }, (_, i) => i + 1),
    );
  });

  it("cuts a tool result past MAX_EVENT_PAYLOAD_BYTES and marks it; a huge delta goes as several whole ones", async () => {
    const gw = scriptedGateway(ackAll);
    const box = outbox(gw.fetch);
    const s = box.open({ jobId: "j1", executionId: "e-j1", epoch: 1, token: TOKEN });
    const content = "QUJD".repeat(350_000); // 1.4 MB, like a 1 MiB read_file in base64
    s.emit("tool.result", { id: "c1", ok: true, output: { path: "/workspace/big", content, truncated: false } });
    const text = `${"a".repeat(300_000)}\u{1F600}${"b".repeat(300_000)}`;
    s.emit("model.delta", { text });
    s.end();
    expect(await box.drain(5000)).toBe(true);
    const events = gw.requests.flatMap((r) => r.flatMap((b) => b.events));
    const result = events[0] as EventEnvelope & { payload: Record<string, unknown> };
    expect(result.payload).toMatchObject({ id: "c1", ok: true, truncated: true });
    expect(result.payload.original_bytes).toBe(
      Buffer.byteLength(
        JSON.stringify({ id: "c1", ok: true, output: { path: "/workspace/big", content, truncated: false } }),
      ),
    );
    expect(Buffer.byteLength(JSON.stringify(result.payload))).toBeLessThanOrEqual(MAX_EVENT_PAYLOAD_BYTES);
    const cut = result.payload.output as { path: string; content: string };
    expect(cut.path).toBe("/workspace/big");
    expect(content.startsWith(cut.content)).toBe(true);
    const deltas = events.slice(1).map((e) => (e.payload as { text: string }).text);
    expect(deltas.length).toBeGreaterThan(1);
    expect(deltas.join("")).toBe(text);
    expect(events.map((e) => e.seq)).toEqual(events.map((_, i) => i + 1));
  });
});
