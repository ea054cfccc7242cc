/**
 * `npm run bench:limits` — the per-tenant limits' figures for docs/limits.md, on their defaults:
 *  1. a burst from one API key past the request rate: how many are answered 429, and Retry-After;
 *  2. 300 SSE streams opened at once on one job from one key: how many are refused, and that
 *     closing some lets exactly that many open again;
 *  3. the rate limiter's cost: GET /v1/jobs/:id at a fixed concurrency with the check on (a limit
 *     no request reaches, so every request pays the Redis round trip) and off, alternated.
 * Starts its own stacks (no sandbox-host: jobs stay queued and streams stay open) and stops them.
 */
import { setTimeout as sleep } from "node:timers/promises";
import { inspect } from "node:util";
import { LIMIT_DEFAULTS } from "../../src/contracts/limits";
import { type Stack, startStack } from "../stack/start";
import { pct, startBench } from "./harness";

const bench = startBench({ usage: "npm run bench:limits [-- --json]" });

const STREAMS = 300;
const OVERHEAD_REQUESTS = 3000;
const OVERHEAD_CONCURRENCY = 16;
const OVERHEAD_ROUNDS = 3;

async function submit(stack: Stack): Promise<string> {
  const res = await fetch(`${stack.gatewayUrl}/v1/jobs`, {
    method: "POST",
    headers: { authorization: `Bearer ${stack.apiKey}`, "content-type": "application/json" },
    body: JSON.stringify({ input: { messages: [{ role: "user", content: "bench limits" }] } }),
  });
  if (res.status !== 202) throw new Error(`submit: HTTP ${res.status} ${await res.text()}`);
  return ((await res.json()) as { job: { id: string } }).job.id;
}

async function burst(stack: Stack, n: number) {
  const headers = { authorization: `Bearer ${stack.apiKey}` };
  const answers = await Promise.all(
    Array.from({ length: n }, async () => {
      const res = await fetch(`${stack.gatewayUrl}/v1/jobs?limit=1`, { headers });
      await res.arrayBuffer();
      return { status: res.status, retryAfter: res.headers.get("retry-after") };
    }),
  );
  const refused = answers.filter((a) => a.status === 429);
  const retryAfter = [...new Set(refused.map((a) => a.retryAfter))].sort();
  return { sent: n, ok: answers.filter((a) => a.status === 200).length, refused: refused.length, retryAfter };
}

async function streams(stack: Stack, jobId: string) {
  const url = `${stack.gatewayUrl}/v1/jobs/${jobId}/events`;
  const headers = { authorization: `Bearer ${stack.apiKey}`, accept: "text/event-stream" };
  const open: AbortController[] = [];
  const attempt = async () => {
    const ac = new AbortController();
    const res = await fetch(url, { headers, signal: ac.signal });
    if (res.status === 200) open.push(ac);
    else await res.arrayBuffer();
    return res.status;
  };
  const t0 = performance.now();
  const first = await Promise.all(Array.from({ length: STREAMS }, attempt));
  const openMs = performance.now() - t0;
  const closeN = 50;
  for (const ac of open.splice(0, closeN)) ac.abort();
  // The gateway learns of a closed SSE client at its next keepalive write (every 10 s).
  const closedAt = performance.now();
  let again: number[] = [];
  let freedAfterMs = 0;
  for (;;) {
    await sleep(500);
    const probe = await attempt();
    if (probe === 200) {
      freedAfterMs = performance.now() - closedAt;
      again = [probe, ...(await Promise.all(Array.from({ length: closeN + 9 }, attempt)))];
      break;
    }
    if (performance.now() - closedAt > 60_000) throw new Error("no slot came free within 60 s");
  }
  for (const ac of open.splice(0)) ac.abort();
  return {
    attempted: STREAMS,
    opened: first.filter((s) => s === 200).length,
    refused: first.filter((s) => s === 429).length,
    other: first.filter((s) => s !== 200 && s !== 429).length,
    openAllMs: Math.round(openMs),
    closed: closeN,
    freedAfterMs: Math.round(freedAfterMs),
    reopenAttempts: again.length,
    reopened: again.filter((s) => s === 200).length,
  };
}

/** Requests per second and latency percentiles of GET /v1/jobs/:id at a fixed concurrency. */
async function readRate(stack: Stack, jobId: string) {
  const headers = { authorization: `Bearer ${stack.apiKey}` };
  const latencies: number[] = [];
  let next = 0;
  let bad = 0;
  const t0 = performance.now();
  await Promise.all(
    Array.from({ length: OVERHEAD_CONCURRENCY }, async () => {
      while (next++ < OVERHEAD_REQUESTS) {
        const s = performance.now();
        const res = await fetch(`${stack.gatewayUrl}/v1/jobs/${jobId}`, { headers });
        await res.arrayBuffer();
        if (res.status !== 200) bad++;
        latencies.push(performance.now() - s);
      }
    }),
  );
  const seconds = (performance.now() - t0) / 1000;
  if (bad > 0) throw new Error(`${bad} reads were not 200`);
  return { rps: Math.round(OVERHEAD_REQUESTS / seconds), p50: pct(latencies, 50), p95: pct(latencies, 95) };
}

async function main() {
  const results: Record<string, unknown> = { defaults: LIMIT_DEFAULTS };

  console.error("stack with the default limits…");
  const stack = await startStack({ hosts: 0 });
  try {
    const jobId = await submit(stack);
    const n = Math.round(LIMIT_DEFAULTS.rateLimitRequests * 1.25);
    results.burst = await burst(stack, n);
    console.error("burst:", results.burst);
    await sleep(LIMIT_DEFAULTS.rateLimitWindowS * 2 * 1000); // a fresh window for the streams
    results.streams = await streams(stack, jobId);
    console.error("streams:", results.streams);
  } finally {
    await stack.stop();
  }

  // Two gateways on one stack would share nothing but Postgres and Redis; two stacks keep each
  // measurement on a gateway with one setting. Rounds alternate so drift hits both.
  const cost: Array<{ round: number; on: unknown; off: unknown }> = [];
  const stacks: Record<"on" | "off", Stack> = {
    on: await startStack({ hosts: 0, gatewayVars: { RATE_LIMIT_REQUESTS: "100000000" } }),
    off: await startStack({ hosts: 0, gatewayVars: { RATE_LIMIT_REQUESTS: "0" } }),
  };
  try {
    const jobs = { on: await submit(stacks.on), off: await submit(stacks.off) };
    await readRate(stacks.on, jobs.on); // warm-up: bundle loaded, scripts known, pools open
    await readRate(stacks.off, jobs.off);
    for (let round = 1; round <= OVERHEAD_ROUNDS; round++) {
      const on = await readRate(stacks.on, jobs.on);
      const off = await readRate(stacks.off, jobs.off);
      cost.push({ round, on, off });
      console.error(`round ${round}: limiter on`, on, "off", off);
    }
  } finally {
    await stacks.on.stop();
    await stacks.off.stop();
  }
  results.rateLimiterCost = { requests: OVERHEAD_REQUESTS, concurrency: OVERHEAD_CONCURRENCY, rounds: cost };
  bench.say(inspect(results, { depth: 6 }));
  bench.say(bench.load());
  bench.done(results);
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
