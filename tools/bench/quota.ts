/**
 * `npm run bench:quota` — the quota lease store measured on this machine, in one run:
 *
 *  1. acquire+release pairs per second and p50/p99 pair latency, 8 concurrent loops, for
 *     (a) the lease scripts through @upstash/redis + the Upstash bridge (the production path),
 *     (b) the same Lua over raw ioredis, (c) redis-semaphore's `Semaphore` over ioredis on the
 *     same redis-server. Prints the ratios against redis-semaphore.
 *  2. Excess demand: limit 10, 30 workers on 3 simulated hosts (3 stores), each holding ~20 ms,
 *     waiting with acquireWithWait. Samples % of the limit in use (server ZCOUNT of live leases
 *     and client-side holders, every 5 ms) and counts over-admission (must be 0). The same
 *     workload on redis-semaphore for comparison.
 *
 * Self-contained (own redis-server + bridge), ~40 s. `--json` prints the figures as JSON (harness.ts).
 */
import { randomBytes } from "node:crypto";
import { Redis as IORedis } from "ioredis";
import { Semaphore } from "redis-semaphore";
import { ioredisLuaRunner } from "../../sandbox-host/quota/ioredis-runner";
import { loadQuotaScripts } from "../../sandbox-host/quota/load-scripts";
import { sleep } from "../../src/domain/async";
import { redisKeys } from "../../src/quota/keys";
import { createLeaseStore, type LeaseStore } from "../../src/quota/lease-store";
import { createRedisClient } from "../../src/quota/redis";
import type { LuaRunner } from "../../src/quota/scripts";
import { acquireWithWait } from "../../src/quota/wait";
import { startUpstashBridge } from "../bridges/upstash-rest/main";
import { startRedis } from "../stack/services/redis";
import { loadAverage, pct, startBench } from "./harness";

const THROUGHPUT_MS = 5000;
const LOOPS = 8;
const UTIL_MS = 6000;
const LIMIT = 10;
const WORKERS = 30;
const HOSTS = 3;
const HOLD_MS = 20;
const bench = startBench({
  usage: "npm run bench:quota -- [--slack=0.5] [--json]",
  options: { slack: { type: "string", default: "0.5" } },
});
const SLACK = Number(bench.args.slack);
interface Pair {
  acquire(id: string): Promise<() => Promise<void>>;
}

async function throughput(
  name: string,
  pair: Pair,
): Promise<{ name: string; perSec: number; p50: number; p99: number }> {
  const lat: number[] = [];
  const end = performance.now() + THROUGHPUT_MS;
  let seq = 0;
  await Promise.all(
    Array.from({ length: LOOPS }, async () => {
      while (performance.now() < end) {
        const t = performance.now();
        const release = await pair.acquire(`${name}-${++seq}`);
        await release();
        lat.push(performance.now() - t);
      }
    }),
  );
  return { name, perSec: lat.length / (THROUGHPUT_MS / 1000), p50: pct(lat, 50), p99: pct(lat, 99) };
}

const leasePair = (store: LeaseStore): Pair => ({
  async acquire(id) {
    const r = await store.acquire(id, [{ key: "tp", limit: 1_000_000 }]);
    if (!r.admitted) throw new Error(`not admitted: ${r.reason}`);
    return async () => {
      await store.release(r.lease);
    };
  },
});

const semaphorePair = (client: IORedis, key: string, limit: number): Pair => ({
  async acquire() {
    const s = new Semaphore(client, key, limit, { lockTimeout: 15_000, refreshInterval: 0, retryInterval: 10 });
    await s.acquire();
    return () => s.release();
  },
});

interface Utilization {
  name: string;
  serverInUsePct: number;
  clientInUsePct: number;
  overAdmissions: number;
  maxConcurrent: number;
  pairsPerSec: number;
  waitP50: number;
  waitP99: number;
}

/** 30 workers loop acquire → hold 20 ms → release; sampled every 5 ms. */
async function utilization(
  name: string,
  acquire: (worker: number, id: string) => Promise<() => Promise<void>>,
  serverCount: () => Promise<number>,
): Promise<Utilization> {
  let holding = 0;
  let maxConcurrent = 0;
  let overAdmissions = 0;
  let done = 0;
  const waits: number[] = [];
  const serverSamples: number[] = [];
  const clientSamples: number[] = [];
  let stop = false;
  let seq = 0;
  const workers = Array.from({ length: WORKERS }, async (_, w) => {
    while (!stop) {
      const t = performance.now();
      const release = await acquire(w, `${name}-${w}-${++seq}`);
      waits.push(performance.now() - t);
      holding++;
      if (holding > LIMIT) overAdmissions++;
      maxConcurrent = Math.max(maxConcurrent, holding);
      await sleep(HOLD_MS);
      holding--;
      await release();
      done++;
    }
  });
  await sleep(300); // warm-up: let the queue form
  done = 0;
  const t0 = performance.now();
  while (performance.now() - t0 < UTIL_MS) {
    serverSamples.push(await serverCount());
    clientSamples.push(holding);
    await sleep(5);
  }
  const elapsed = performance.now() - t0;
  const pairs = done;
  stop = true;
  await Promise.all(workers);
  const avg = (xs: number[]) => xs.reduce((a, b) => a + b, 0) / xs.length;
  return {
    name,
    serverInUsePct: (avg(serverSamples) / LIMIT) * 100,
    clientInUsePct: (avg(clientSamples) / LIMIT) * 100,
    overAdmissions: overAdmissions + serverSamples.filter((n) => n > LIMIT).length,
    maxConcurrent,
    pairsPerSec: pairs / (elapsed / 1000),
    waitP50: pct(waits, 50),
    waitP99: pct(waits, 99),
  };
}

const redis = await startRedis();
const token = randomBytes(16).toString("hex");
const bridge = await startUpstashBridge({ redisUrl: redis.url, token, log: () => {} });
const upstash = createRedisClient({ url: bridge.url, token });
const tcp = new IORedis(redis.url, { protocol: 2 });
const sampler = new IORedis(redis.url, { protocol: 2 });
for (const c of [tcp, sampler]) c.on("error", (err) => console.error(`[bench] redis: ${err.message}`));
const scripts = await loadQuotaScripts();
const raw: LuaRunner = ioredisLuaRunner(tcp);
const serverNow = async () => {
  const [s, us] = await sampler.time();
  return Number(s) * 1000 + Math.floor(Number(us) / 1000);
};

bench.say(
  `quota bench: ${LOOPS} concurrent loops × ${THROUGHPUT_MS / 1000} s per driver; 2 cores, load ${loadAverage()[0]?.toFixed(1)}\n`,
);
const tp = [];
for (const [name, pair] of [
  ["lease / upstash client + bridge", leasePair(createLeaseStore(upstash, scripts, { keys: redisKeys("b1") }))],
  ["lease / ioredis (same Lua)", leasePair(createLeaseStore(raw, scripts, { keys: redisKeys("b2") }))],
  ["redis-semaphore / ioredis", semaphorePair(tcp, "b3:sem", 1_000_000)],
] as const) {
  const r = await throughput(name, pair);
  tp.push(r);
  bench.say(
    `${r.name.padEnd(34)} ${r.perSec.toFixed(0).padStart(6)} pairs/s   p50 ${r.p50.toFixed(2)} ms   p99 ${r.p99.toFixed(2)} ms`,
  );
}
const sem = tp[2]!;
bench.say(
  `ratio vs redis-semaphore (pairs/s): lease over ioredis ${(tp[1]!.perSec / sem.perSec).toFixed(2)}×, ` +
    `lease over upstash+bridge ${(tp[0]!.perSec / sem.perSec).toFixed(2)}× (HTTP vs TCP: not like for like)\n`,
);

bench.say(
  `excess demand: limit ${LIMIT}, ${WORKERS} workers on ${HOSTS} hosts, hold ${HOLD_MS} ms, ${UTIL_MS / 1000} s`,
);
const util: Utilization[] = [];
for (const [name, runner, prefix] of [
  ["lease / upstash client + bridge", null, "u1"],
  ["lease / ioredis (same Lua)", raw, "u2"],
] as const) {
  const keys = redisKeys(prefix);
  const hosts = Array.from({ length: HOSTS }, () =>
    createLeaseStore(runner ?? upstash, scripts, { keys, leaseTimeoutMs: 15_000 }),
  );
  const leaseKey = keys.quotaLeases("model");
  util.push(
    await utilization(
      name,
      async (w, id) => {
        const host = hosts[w % HOSTS]!;
        const out = await acquireWithWait(host, {
          holder: id,
          demands: [{ key: "model", limit: LIMIT }],
          maxWaitMs: 30_000,
          slackRatio: SLACK,
        });
        if (out.kind !== "admitted") throw new Error(`${id}: ${out.kind}`);
        return async () => {
          await host.release(out.lease);
        };
      },
      async () => sampler.zcount(leaseKey, (await serverNow()) - 15_000, "+inf"),
    ),
  );
}
util.push(
  await utilization(
    "redis-semaphore / ioredis",
    async () => {
      const s = new Semaphore(tcp, "u3:sem", LIMIT, {
        lockTimeout: 15_000,
        refreshInterval: 0,
        retryInterval: 10,
        acquireTimeout: 30_000,
      });
      await s.acquire();
      return () => s.release();
    },
    () => sampler.zcard("semaphore:u3:sem"),
  ),
);
for (const u of util) {
  bench.say(
    `${u.name.padEnd(34)} in use ${u.serverInUsePct.toFixed(1)} % (server) / ${u.clientInUsePct.toFixed(1)} % (holders)   ` +
      `over-admission ${u.overAdmissions}   max ${u.maxConcurrent}   ${u.pairsPerSec.toFixed(0)} pairs/s   ` +
      `wait p50 ${u.waitP50.toFixed(1)} ms p99 ${u.waitP99.toFixed(1)} ms`,
  );
}
bench.say(bench.load());
bench.done({ throughput: tp, utilization: util });

tcp.disconnect();
sampler.disconnect();
await bridge.close();
await redis.stop();
if (util.some((u) => u.overAdmissions > 0)) process.exitCode = 1;
