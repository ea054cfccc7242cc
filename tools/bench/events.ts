/**
 * `npm run bench:events` — one job's event path measured end to end on this machine:
 * host-style signed batches → POST /internal/events (wrangler dev / workerd) → the job's
 * JobEvents projector (SQLite append) → SSE fan-out → SSE clients in this process.
 *
 * For 1 and for 100 subscribers on one job:
 *  - throughput: N events in batches of BATCH, one request in flight (as the host outbox sends),
 *    timed from the first send until every subscriber has received the terminal event;
 *  - latency: a paced stream (10 events every 10 ms ≈ 1,000 events/s, the shape of a fast model
 *    stream after the outbox's 10 ms batching), each event stamped at send and measured at SSE
 *    receive (same process, same clock): p50/p95/p99 over every (event, subscriber) pair.
 *
 * Self-contained: starts its own stack with no sandbox-hosts and stops it at the end. The bench
 * plays the host: it claims and starts each job with the real ownership statements (so the
 * execution row holds the claim token the gateway derives the ingest key from), macs every batch
 * like the outbox, and writes the terminal state to Postgres before sending the terminal event.
 * Nothing else writes to the job's stream. `--json` prints JSON too.
 */

import { randomUUID } from "node:crypto";
import { drizzle } from "drizzle-orm/node-postgres";
import pg from "pg";
import type { EventEnvelope } from "../../src/contracts/events";
import type { Db } from "../../src/db/client";
import { claimJob, type ExecutionIdentity, finishJob, markStarted } from "../../src/db/ownership-repo";
import * as schema from "../../src/db/schema";
import { sleep } from "../../src/domain/async";
import { batchMac, deriveIngestKey, signedHeaders } from "../../src/domain/signing";
import { readSse } from "../lib/sse";
import { pct } from "../load/stats";
import { type Stack, startStack } from "../stack";

const BATCH = Number(process.env.BENCH_BATCH ?? 256);
const THROUGHPUT_EVENTS: Record<number, number> = { 1: 20_000, 100: 5_000 };
const PACED_MS = 3_000;
const PACED_BATCH = 10;
const PACED_EVERY_MS = 10;
const HOST = "bench-events";

const now = () => performance.timeOrigin + performance.now();
async function newJob(stack: Stack): Promise<string> {
  const res = await fetch(`${stack.gatewayUrl}/v1/jobs`, {
    method: "POST",
    headers: { authorization: `Bearer ${stack.apiKey}`, "content-type": "application/json" },
    body: JSON.stringify({ input: { messages: [{ role: "user", content: "bench" }] } }),
  });
  if (res.status !== 202) throw new Error(`POST /v1/jobs answered ${res.status}: ${await res.text()}`);
  return ((await res.json()) as { job: { id: string } }).job.id;
}

class Sender {
  private seq = 1;
  private constructor(
    private readonly stack: Stack,
    private readonly db: Db,
    private readonly id: ExecutionIdentity,
    private readonly key: CryptoKey,
  ) {}

  /** Claim and start `jobId` as a host would; its batches are then signed with the execution's key. */
  static async start(stack: Stack, db: Db, jobId: string): Promise<Sender> {
    const token = randomUUID();
    const epoch = await claimJob(db, jobId, HOST, token);
    if (epoch === null) throw new Error(`could not claim ${jobId}`);
    const id: ExecutionIdentity = { jobId, host: HOST, epoch, token, executionId: randomUUID() };
    if (!(await markStarted(db, id))) throw new Error(`could not start ${jobId}`);
    return new Sender(stack, db, id, await deriveIngestKey(token, id.executionId));
  }

  async send(n: number, terminal = false): Promise<void> {
    const { jobId, executionId, epoch } = this.id;
    const events: EventEnvelope[] = [];
    for (let i = 0; i < n; i++) {
      const last = terminal && i === n - 1;
      const head = { job_id: jobId, execution_id: executionId, epoch, seq: this.seq++, ts: new Date().toISOString() };
      events.push(
        last
          ? { ...head, type: "run.completed", payload: { output: "done", sent_at: now() } }
          : { ...head, type: "model.delta", payload: { text: "token ", sent_at: now() } },
      );
    }
    // Like the host: the terminal state is in Postgres before the terminal event is sent.
    if (terminal && !(await finishJob(this.db, this.id, { state: "completed", output: "done" }))) {
      throw new Error(`terminal write missed for ${jobId}`);
    }
    const nonce = randomUUID();
    const eventsJson = JSON.stringify(events);
    const mac = await batchMac(this.key, nonce, jobId, eventsJson);
    const body = `{"job_id":${JSON.stringify(jobId)},"events":${eventsJson},"mac":"${mac}"}`;
    const res = await fetch(`${this.stack.gatewayUrl}/internal/events`, {
      method: "POST",
      headers: await signedHeaders(this.stack.signingSecret, "POST", "/internal/events", body, nonce),
      body,
    });
    const text = await res.text();
    if (!res.ok) throw new Error(`ingest answered ${res.status}: ${text}`);
    const ack = JSON.parse(text) as { acked_seq: number };
    if (ack.acked_seq !== this.seq - 1) throw new Error(`ack ${ack.acked_seq}, expected ${this.seq - 1}`);
  }
}

/**
 * Subscribe `n` SSE clients; resolves once all are connected. A client the projector cuts off for
 * reading too slowly reconnects with Last-Event-ID, as a real client would (counted).
 */
async function subscribe(stack: Stack, jobId: string, n: number, parse: boolean) {
  const latencies: number[] = [];
  let received = 0;
  let reconnects = 0;
  const connected: Promise<void>[] = [];
  const done = Array.from({ length: n }, () => {
    let markConnected: () => void = () => {};
    connected.push(new Promise<void>((r) => (markConnected = r)));
    return (async () => {
      let lastId: string | null = null;
      let finished = false;
      setTimeout(() => markConnected(), 300);
      while (!finished) {
        const headers: Record<string, string> = { authorization: `Bearer ${stack.apiKey}` };
        if (lastId !== null) headers["last-event-id"] = lastId;
        try {
          for await (const ev of readSse(`${stack.gatewayUrl}/v1/jobs/${jobId}/events`, {
            headers,
            onComment: () => markConnected(),
          })) {
            received++;
            lastId = ev.id;
            if (ev.event === "run.completed") finished = true;
            if (parse) {
              const data = JSON.parse(ev.data) as { payload: { sent_at: number } };
              latencies.push(now() - data.payload.sent_at);
            }
          }
        } catch {
          // cut off as a slow reader (or the connection dropped): resume from lastId
        }
        if (!finished) reconnects++;
      }
    })();
  });
  await Promise.all(connected);
  return { done: Promise.all(done), latencies, received: () => received, reconnects: () => reconnects };
}

async function throughput(stack: Stack, db: Db, subscribers: number) {
  const jobId = await newJob(stack);
  const total = THROUGHPUT_EVENTS[subscribers] ?? 5_000;
  const subs = await subscribe(stack, jobId, subscribers, false);
  const sender = await Sender.start(stack, db, jobId);
  const t0 = now();
  for (let sent = 0; sent < total; sent += BATCH) {
    const n = Math.min(BATCH, total - sent);
    await sender.send(n, sent + n >= total);
  }
  const tSent = now();
  await subs.done;
  const tAll = now();
  if (subs.received() !== total * subscribers) throw new Error(`received ${subs.received()} of ${total * subscribers}`);
  return {
    subscribers,
    events: total,
    batch: BATCH,
    ingest_events_per_s: Math.round(total / ((tSent - t0) / 1000)),
    end_to_end_events_per_s: Math.round(total / ((tAll - t0) / 1000)),
    deliveries_per_s: Math.round((total * subscribers) / ((tAll - t0) / 1000)),
    slow_reader_reconnects: subs.reconnects(),
  };
}

async function latency(stack: Stack, db: Db, subscribers: number) {
  const jobId = await newJob(stack);
  const subs = await subscribe(stack, jobId, subscribers, true);
  const sender = await Sender.start(stack, db, jobId);
  const tEnd = now() + PACED_MS;
  let next = now();
  let events = 0;
  while (now() < tEnd) {
    await sender.send(PACED_BATCH);
    events += PACED_BATCH;
    next += PACED_EVERY_MS;
    const wait = next - now();
    if (wait > 0) await sleep(wait);
  }
  await sender.send(1, true);
  await subs.done;
  const l = subs.latencies;
  return {
    subscribers,
    events: events + 1,
    samples: l.length,
    p50_ms: +pct(l, 50).toFixed(2),
    p95_ms: +pct(l, 95).toFixed(2),
    p99_ms: +pct(l, 99).toFixed(2),
    max_ms: +l.reduce((m, x) => Math.max(m, x), 0).toFixed(2),
    send_rate_events_per_s: Math.round((events + 1) / (PACED_MS / 1000)),
    slow_reader_reconnects: subs.reconnects(),
  };
}

async function main() {
  const stack = await startStack({ hosts: 0 });
  const pool = new pg.Pool({ connectionString: stack.databaseUrl, max: 2 });
  const db = drizzle(pool, { schema });
  try {
    // Warm the isolate, the DO namespace and the key cache so the first measurement is not a cold start.
    const warm = await newJob(stack);
    await (await Sender.start(stack, db, warm)).send(10, true);
    const results = [];
    for (const subscribers of [1, 100]) {
      const t = await throughput(stack, db, subscribers);
      const l = await latency(stack, db, subscribers);
      results.push({ ...t, latency: l });
      console.log(
        `${subscribers} subscriber(s): ${t.end_to_end_events_per_s} events/s end to end (ingest ${t.ingest_events_per_s}/s, ` +
          `${t.deliveries_per_s} deliveries/s, ${t.events} events in batches of ${t.batch}, ${t.slow_reader_reconnects} slow-reader reconnects); ` +
          `paced (${l.send_rate_events_per_s} events/s achieved) latency p50 ${l.p50_ms} ms, p95 ${l.p95_ms} ms, p99 ${l.p99_ms} ms, max ${l.max_ms} ms (${l.samples} samples)`,
      );
    }
    if (process.argv.includes("--json")) console.log(JSON.stringify(results, null, 2));
  } finally {
    await pool.end();
    await stack.stop();
  }
}

await main();
