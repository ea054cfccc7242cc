/**
 * `npm run demo:quota` — why the quota uses named leases, on real Redis: an anonymous
 * counter (INCR/DECR) and named leases under the SAME random crash rate. A worker that "crashes"
 * skips its DECR / release (and its lease stops being renewed). Prints, over time and side by
 * side, the capacity still usable by live work (limit − slots held by crashed workers): the counter leaks slots it can never take back, the lease recovers each one
 * after the lease timeout. Also writes .tmp/quota-demo.html. Self-contained (own redis-server +
 * Upstash bridge; both sides go through the real @upstash/redis client), ~20 s.
 *
 *   tsx tools/cli/demo-quota.ts [--seconds 20] [--crash 0.1] [--limit 10] [--workers 10]
 */
import { randomBytes } from "node:crypto";
import { mkdir, writeFile } from "node:fs/promises";
import { parseArgs } from "node:util";
import { Redis as IORedis } from "ioredis";
import { loadQuotaScripts } from "../../sandbox-host/quota/load-scripts";
import { sleep } from "../../src/domain/async";
import { redisKeys } from "../../src/quota/keys";
import { createLeaseStore, type QuotaLease } from "../../src/quota/lease-store";
import { createRedisClient } from "../../src/quota/redis";
import { startUpstashBridge } from "../bridges/upstash-rest/main";
import { startRedis } from "../stack/services/redis";

const { values } = parseArgs({
  options: {
    seconds: { type: "string", default: "20" },
    crash: { type: "string", default: "0.1" },
    limit: { type: "string", default: "10" },
    workers: { type: "string", default: "10" },
  },
});
const SECONDS = Number(values.seconds);
const CRASH = Number(values.crash);
const LIMIT = Number(values.limit);
const WORKERS = Number(values.workers);
const HEARTBEAT_MS = 400;
const LEASE_MS = 3 * HEARTBEAT_MS;
const holdMs = () => 150 + Math.random() * 350;

const redis = await startRedis();
const token = randomBytes(16).toString("hex");
const bridge = await startUpstashBridge({ redisUrl: redis.url, token, log: () => {} });
const client = createRedisClient({ url: bridge.url, token });
const sampler = new IORedis(redis.url, { protocol: 2 });
const keys = redisKeys("demo");
const COUNTER = "demo:counter:inflight";
const store = createLeaseStore(client, await loadQuotaScripts(), {
  keys,
  heartbeatIntervalMs: HEARTBEAT_MS,
  leaseTimeoutMs: LEASE_MS,
});
const demand = [{ key: "model", limit: LIMIT }];
const tally = {
  counter: { done: 0, crashed: 0, refused: 0 },
  lease: { done: 0, crashed: 0, refused: 0 },
};
let stopping = false;
/** Tasks really running right now, per side (what Redis should count, if nothing leaked). */
const running = { counter: 0, lease: 0 };

/** The anonymous counter: INCR, over the limit → DECR and refuse; done → DECR (unless crashed). */
async function counterWorker(): Promise<void> {
  while (!stopping) {
    if ((await client.incr(COUNTER)) > LIMIT) {
      await client.decr(COUNTER);
      tally.counter.refused++;
      await sleep(50 + Math.random() * 50);
      continue;
    }
    running.counter++;
    await sleep(holdMs());
    running.counter--;
    if (Math.random() < CRASH)
      tally.counter.crashed++; // process gone: the DECR never happens
    else {
      await client.decr(COUNTER);
      tally.counter.done++;
    }
  }
}

/** The lease: a host heartbeat renews every live lease in one call; a crash just stops renewing. */
const live = new Set<QuotaLease>();
async function heartbeat(): Promise<void> {
  while (!stopping) {
    await sleep(HEARTBEAT_MS);
    const { lost } = await store.renew([...live]).catch(() => ({ lost: [] as QuotaLease[] }));
    for (const l of lost) live.delete(l);
  }
}
let seq = 0;
async function leaseWorker(): Promise<void> {
  while (!stopping) {
    const got = await store.acquire(`exec-${++seq}`, demand);
    if (!got.admitted) {
      tally.lease.refused++;
      await sleep(50 + Math.random() * 50);
      continue;
    }
    live.add(got.lease);
    running.lease++;
    await sleep(holdMs());
    running.lease--;
    live.delete(got.lease);
    if (Math.random() < CRASH)
      tally.lease.crashed++; // never released, never renewed again
    else {
      await store.release(got.lease);
      tally.lease.done++;
    }
  }
}

/**
 * Usable capacity = limit − slots Redis counts as taken that no running task holds (leaked).
 * Counter: its value vs running tasks. Lease: unexpired members vs running tasks.
 */
async function sample(): Promise<{ counter: number; lease: number }> {
  const [sec, usec] = await sampler.time();
  const serverMs = Number(sec) * 1000 + Math.floor(Number(usec) / 1000);
  const [inflight, leased] = await Promise.all([
    sampler.get(COUNTER),
    sampler.zcount(keys.quotaLeases("model"), serverMs - LEASE_MS, "+inf"),
  ]);
  const leak = (taken: number, run: number) => Math.min(LIMIT, Math.max(0, taken - run));
  return { counter: LIMIT - leak(Number(inflight ?? 0), running.counter), lease: LIMIT - leak(leased, running.lease) };
}

const bar = (free: number) => "█".repeat(free) + "·".repeat(LIMIT - free);
console.log(
  `limit ${LIMIT}, ${WORKERS} workers per side, crash rate ${(CRASH * 100).toFixed(0)} % per task, ` +
    `lease timeout ${LEASE_MS} ms (3 × ${HEARTBEAT_MS} ms heartbeat)\n`,
);
console.log(`usable capacity = limit − slots held by crashed workers\n`);
console.log(`  t    counter (INCR/DECR)${" ".repeat(Math.max(0, LIMIT - 13))}   lease (ZSET)`);
const series: { t: number; counter: number; lease: number }[] = [];
const workers = [
  ...Array.from({ length: WORKERS }, counterWorker),
  ...Array.from({ length: WORKERS }, leaseWorker),
  heartbeat(),
];
const started = performance.now();
for (let t = 0.5; t <= SECONDS; t += 0.5) {
  await sleep(started + t * 1000 - performance.now());
  const s = await sample();
  series.push({ t, ...s });
  if (Number.isInteger(t)) {
    console.log(
      `${t.toFixed(0).padStart(3)}s  ${bar(s.counter)} ${String(s.counter).padStart(2)}      ${bar(s.lease)} ${String(s.lease).padStart(2)}`,
    );
  }
}
stopping = true;
await Promise.all(workers);

const avg = (xs: number[]) => xs.reduce((a, b) => a + b, 0) / xs.length;
const lastQuarter = series.slice(Math.floor(series.length * 0.75));
console.log(
  `
counter: ${tally.counter.done} tasks done, ${tally.counter.crashed} crashed, ${tally.counter.refused} refusals; ` +
    `usable capacity in the last quarter: avg ${avg(lastQuarter.map((s) => s.counter)).toFixed(1)} of ${LIMIT}
lease:   ${tally.lease.done} tasks done, ${tally.lease.crashed} crashed, ${tally.lease.refused} refusals; ` +
    `usable capacity in the last quarter: avg ${avg(lastQuarter.map((s) => s.lease)).toFixed(1)} of ${LIMIT}
The counter's ${tally.counter.crashed} crashed +1s are anonymous: nobody can tell them from live work, so
the slots are gone for good. Each crashed lease is named and timed: it expired ${LEASE_MS} ms after its
last heartbeat and the next acquire purged it. At any moment about crashes/s × lease timeout ≈ ` +
    `${((tally.lease.crashed / SECONDS) * (LEASE_MS / 1000)).toFixed(1)} lease slots
are still waiting to expire (Little's law): a shorter heartbeat shrinks that; the counter's loss only grows.`,
);

await mkdir(".tmp", { recursive: true });
await writeFile(".tmp/quota-demo.html", html(series));
console.log("\nchart: .tmp/quota-demo.html");

sampler.disconnect();
await bridge.close();
await redis.stop();

function html(points: typeof series): string {
  const w = 720;
  const h = 240;
  const x = (t: number) => (t / SECONDS) * (w - 40) + 30;
  const y = (v: number) => h - 20 - (v / LIMIT) * (h - 40);
  const line = (k: "counter" | "lease") => points.map((p) => `${x(p.t).toFixed(1)},${y(p[k]).toFixed(1)}`).join(" ");
  return `<!doctype html><meta charset="utf-8"><title>quota: counter vs lease</title>
<body style="font-family:sans-serif"><h3>Usable capacity (limit − slots held by crashed workers) of ${LIMIT} over ${SECONDS} s, crash rate ${(CRASH * 100).toFixed(0)} %</h3>
<svg width="${w}" height="${h}" style="border:1px solid #ccc">
<line x1="30" y1="${y(0)}" x2="${w - 10}" y2="${y(0)}" stroke="#999"/><text x="2" y="${y(LIMIT) + 4}">${LIMIT}</text><text x="8" y="${y(0) + 4}">0</text>
<polyline fill="none" stroke="#d33" stroke-width="2" points="${line("counter")}"/>
<polyline fill="none" stroke="#2a2" stroke-width="2" points="${line("lease")}"/></svg>
<p><span style="color:#d33">■ anonymous counter (INCR/DECR)</span> &nbsp; <span style="color:#2a2">■ named lease (ZSET)</span></p></body>`;
}
