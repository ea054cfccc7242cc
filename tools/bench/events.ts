/**
 * `npm run bench:events` — one job's event path measured end to end on this machine:
 * host-style signed batches → POST /internal/events (workerd) → the job's JobEvents projector
 * (SQLite append) → SSE fan-out → SSE clients in this process.
 *
 * For 1, 10, 100 and 1,000 subscribers on one job (BENCH_EVENTS_SUBSCRIBERS=1,10 to choose):
 *  - throughput: N events in batches of BATCH, one request in flight (as the host outbox sends),
 *    timed from the first send until every subscriber has received the terminal event; the CPU
 *    time workerd and this process spent meanwhile says which side was the limit;
 *  - latency: a paced stream (10 events every 10 ms ≈ 1,000 events/s, the shape of a fast model
 *    stream after the outbox's 10 ms batching), each event stamped at send and measured at SSE
 *    receive (same process, same clock): p50/p95/p99 over every (event, subscriber) pair of up
 *    to LATENCY_SAMPLED subscribers (the others only check their ids, so parsing 1,000 streams'
 *    JSON does not become what is measured).
 *
 * Every subscriber checks that it received exactly the offsets 1..N in order (no loss, no
 * duplicate); the run fails otherwise. The subscribers read the stream's bytes themselves and
 * only pick out the `id:` lines: a full SSE parser per event (eventsource-parser and an async
 * generator step per event) made this process, not the gateway, the limit at 100 subscribers.
 *
 * Self-contained: starts its own stack with no sandbox-hosts and stops it at the end, with the
 * per-tenant stream cap and request rate raised so 1,000 streams of one key are admitted. The
 * bench plays the host: it claims and starts each job with the real ownership statements (so the
 * execution row holds the claim token the gateway derives the ingest key from), macs every batch
 * like the outbox, and writes the terminal state to Postgres before sending the terminal event.
 * Nothing else writes to the job's stream. `--json` prints the figures as JSON (harness.ts).
 */

import { randomUUID } from "node:crypto";
import { readdirSync, readFileSync } from "node:fs";
import { drizzle } from "drizzle-orm/node-postgres";
import pg from "pg";
import type { EventEnvelope } from "../../src/contracts/events";
import type { Db } from "../../src/db/client";
import type { ExecutionIdentity } from "../../src/db/ownership-repo";
import * as schema from "../../src/db/schema";
import { sleep } from "../../src/domain/async";
import { batchMac, deriveIngestKey, signedHeaders } from "../../src/domain/signing";
import { claimJob, finishJob, markStarted } from "../lib/single-row-writes";
import { type Stack, startStack } from "../stack/start";
import { loadAverage, pct, startBench } from "./harness";

const bench = startBench({ usage: "npm run bench:events [-- --json] (sizes: BENCH_BATCH, BENCH_EVENTS_SUBSCRIBERS)" });

const BATCH = Number(process.env.BENCH_BATCH ?? 256);
const SUBSCRIBERS = (process.env.BENCH_EVENTS_SUBSCRIBERS ?? "1,10,100,1000").split(",").map(Number);
/** Enough events that each configuration runs for seconds, not so many that 1,000 take minutes. */
const THROUGHPUT_EVENTS: Record<number, number> = { 1: 20_000, 10: 10_000, 100: 5_000, 1000: 2_000 };
const LATENCY_SAMPLED = 50;
/** Streams opened at once while subscribing (each is an authorized request and a stream slot). */
const CONNECT_AT_ONCE = 100;
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

const load = () => loadAverage().join(" ");

/** CPU ms of this process's workerd descendants (the gateway), from /proc. */
function workerdCpuMs(): number {
  const procs: Array<{ pid: number; ppid: number; comm: string; cpuMs: number }> = [];
  for (const d of readdirSync("/proc")) {
    if (!/^\d+$/.test(d)) continue;
    try {
      const stat = readFileSync(`/proc/${d}/stat`, "utf8");
      const f = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
      const comm = stat.slice(stat.indexOf("(") + 1, stat.lastIndexOf(")"));
      // utime + stime in clock ticks (100 Hz on Linux)
      procs.push({ pid: Number(d), ppid: Number(f[1]), comm, cpuMs: (Number(f[11]) + Number(f[12])) * 10 });
    } catch {
      // the process exited while we looked
    }
  }
  const ours = new Set([process.pid]);
  for (let grew = true; grew; ) {
    grew = false;
    for (const p of procs) {
      if (ours.has(p.ppid) && !ours.has(p.pid)) {
        ours.add(p.pid);
        grew = true;
      }
    }
  }
  return procs.filter((p) => ours.has(p.pid) && p.comm.startsWith("workerd")).reduce((a, p) => a + p.cpuMs, 0);
}

function cpuMeter() {
  const w0 = workerdCpuMs();
  const s0 = process.cpuUsage();
  return () => {
    const s = process.cpuUsage(s0);
    return { workerd_cpu_ms: workerdCpuMs() - w0, bench_process_cpu_ms: Math.round((s.user + s.system) / 1000) };
  };
}

/**
 * One subscriber's stream: reads the bytes, checks every `id:` is the next offset, and (when
 * `onData` is given) hands each frame's data line over. Resolves at the terminal event; throws
 * if the stream ended before it. `id:` and `data:` lines are whole lines of a frame (the data
 * is one line of JSON, which escapes newlines), so a line split across chunks is the only case.
 */
async function readStream(
  res: Response,
  state: { lastId: number },
  count: () => void,
  onData?: (data: string) => void,
): Promise<boolean> {
  if (!res.ok || !res.body) throw new Error(`SSE answered ${res.status}: ${await res.text()}`);
  const reader = res.body.getReader();
  const decoder = new TextDecoder();
  let tail = "";
  let terminal = false;
  for (;;) {
    const { done, value } = await reader.read();
    if (done) return terminal;
    const text = tail + decoder.decode(value, { stream: true });
    const end = text.lastIndexOf("\n");
    tail = text.slice(end + 1);
    let at = 0;
    while (at <= end) {
      const nl = text.indexOf("\n", at);
      if (text.startsWith("id: ", at)) {
        const id = Number(text.slice(at + 4, nl));
        if (id !== state.lastId + 1) throw new Error(`got id ${id} after ${state.lastId}: an event lost or repeated`);
        state.lastId = id;
        count();
      } else if (text.startsWith("event: run.completed", at)) {
        terminal = true;
      } else if (onData && text.startsWith("data: ", at)) {
        onData(text.slice(at + 6, nl));
      }
      at = nl + 1;
    }
  }
}

/**
 * Subscribe `n` SSE clients; resolves once all are connected. A client the projector cuts off for
 * reading too slowly reconnects with Last-Event-ID, as a real client would (counted).
 */
async function subscribe(stack: Stack, jobId: string, n: number, latency: boolean) {
  const latencies: number[] = [];
  let received = 0;
  let reconnects = 0;
  const count = () => {
    received++;
  };
  const connect = (lastId: number) =>
    fetch(`${stack.gatewayUrl}/v1/jobs/${jobId}/events`, {
      headers: {
        authorization: `Bearer ${stack.apiKey}`,
        accept: "text/event-stream",
        ...(lastId > 0 ? { "last-event-id": String(lastId) } : {}),
      },
    });
  const first: Response[] = [];
  for (let i = 0; i < n; i += CONNECT_AT_ONCE) {
    first.push(...(await Promise.all(Array.from({ length: Math.min(CONNECT_AT_ONCE, n - i) }, () => connect(0)))));
  }
  const done = first.map(async (res, i) => {
    const state = { lastId: 0 };
    const onData =
      latency && i < LATENCY_SAMPLED
        ? (data: string) => {
            const sentAt = (JSON.parse(data) as { payload: { sent_at: number } }).payload.sent_at;
            latencies.push(now() - sentAt);
          }
        : undefined;
    let current = res;
    for (;;) {
      let finished = false;
      try {
        finished = await readStream(current, state, count, onData);
      } catch (err) {
        if (err instanceof Error && err.message.includes("lost or repeated")) throw err;
        // cut off as a slow reader (or the connection dropped): resume from the last id
      }
      if (finished) return;
      reconnects++;
      current = await connect(state.lastId);
    }
  });
  return { done: Promise.all(done), latencies, received: () => received, reconnects: () => reconnects };
}

async function throughput(stack: Stack, db: Db, subscribers: number) {
  const jobId = await newJob(stack);
  const total = THROUGHPUT_EVENTS[subscribers] ?? 5_000;
  const subs = await subscribe(stack, jobId, subscribers, false);
  const sender = await Sender.start(stack, db, jobId);
  const loadAtStart = load();
  const cpu = cpuMeter();
  const t0 = now();
  for (let sent = 0; sent < total; sent += BATCH) {
    const n = Math.min(BATCH, total - sent);
    await sender.send(n, sent + n >= total);
  }
  const tSent = now();
  await subs.done;
  const tAll = now();
  const used = cpu();
  if (subs.received() !== total * subscribers) throw new Error(`received ${subs.received()} of ${total * subscribers}`);
  return {
    subscribers,
    events: total,
    batch: BATCH,
    ingest_events_per_s: Math.round(total / ((tSent - t0) / 1000)),
    end_to_end_events_per_s: Math.round(total / ((tAll - t0) / 1000)),
    deliveries_per_s: Math.round((total * subscribers) / ((tAll - t0) / 1000)),
    slow_reader_reconnects: subs.reconnects(),
    ...used,
    // CPU per delivery holds up better than rates on a shared machine: a starved process is slow, not costlier.
    workerd_cpu_us_per_delivery: +((used.workerd_cpu_ms * 1000) / (total * subscribers)).toFixed(2),
    bench_cpu_us_per_delivery: +((used.bench_process_cpu_ms * 1000) / (total * subscribers)).toFixed(2),
    load: loadAtStart,
  };
}

async function latency(stack: Stack, db: Db, subscribers: number) {
  const jobId = await newJob(stack);
  const subs = await subscribe(stack, jobId, subscribers, true);
  const sender = await Sender.start(stack, db, jobId);
  const cpu = cpuMeter();
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
  const used = cpu();
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
    ...used,
    workerd_cpu_us_per_delivery: +((used.workerd_cpu_ms * 1000) / ((events + 1) * subscribers)).toFixed(2),
  };
}

async function main() {
  bench.say(`bench:events — subscribers ${SUBSCRIBERS.join(", ")}; load average ${load()}`);
  const stack = await startStack({
    hosts: 0,
    // One key opens every stream here: its stream cap and request rate must not be the limit.
    gatewayVars: { MAX_STREAMS_PER_TENANT: "5000", RATE_LIMIT_REQUESTS: "1000000" },
  });
  const pool = new pg.Pool({ connectionString: stack.databaseUrl, max: 2 });
  const db = drizzle(pool, { schema });
  try {
    // Warm the isolate, the DO namespace and the key cache so the first measurement is not a cold start.
    const warm = await newJob(stack);
    await (await Sender.start(stack, db, warm)).send(10, true);
    const results = [];
    for (const subscribers of SUBSCRIBERS) {
      const t = await throughput(stack, db, subscribers);
      const l = await latency(stack, db, subscribers);
      results.push({ ...t, latency: l });
      bench.say(
        `${subscribers} subscriber(s): ${t.end_to_end_events_per_s} events/s end to end (ingest ${t.ingest_events_per_s}/s, ` +
          `${t.deliveries_per_s} deliveries/s, ${t.events} events in batches of ${t.batch}, ${t.slow_reader_reconnects} slow-reader reconnects; ` +
          `CPU workerd ${t.workerd_cpu_ms} ms = ${t.workerd_cpu_us_per_delivery} µs/delivery, this process ${t.bench_process_cpu_ms} ms = ${t.bench_cpu_us_per_delivery} µs/delivery; load ${t.load}); ` +
          `paced (${l.send_rate_events_per_s} events/s achieved) latency p50 ${l.p50_ms} ms, p95 ${l.p95_ms} ms, p99 ${l.p99_ms} ms, max ${l.max_ms} ms ` +
          `(${l.samples} samples, ${l.slow_reader_reconnects} reconnects; CPU workerd ${l.workerd_cpu_ms} ms = ${l.workerd_cpu_us_per_delivery} µs/delivery, this process ${l.bench_process_cpu_ms} ms)`,
      );
    }
    bench.say(`load average at the end ${load()}`);
    bench.done({ results });
  } finally {
    await pool.end();
    await stack.stop();
  }
}

await main();
