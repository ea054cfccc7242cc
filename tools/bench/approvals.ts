/**
 * `npm run bench:approvals [N]`: what a wait costs and how fast a decision resumes the run.
 *
 *  1. N jobs (default 100) of an agent whose `shell` requires approval are submitted; once all are
 *     `waiting`, each host's `runs_active` and `quota_leases_held` and the model's quota lease
 *     ZSET in Redis are read: a waiting job holds no slot and no lease.
 *  2. The N calls are approved one at a time. For each, the job's SSE stream is opened and read
 *     up to `run.suspended`, then the decision is POSTed; resume latency is POST sent → the new execution's
 *     first event (`run.resumed`) read from the stream. Prints p50 / p95 / max with the load
 *     average (figures on a shared machine are noisy; rerun on a quiet one).
 */
import pg from "pg";
import { sleep } from "../../src/domain/async";
import { quotaKeys, redisKeys } from "../../src/quota/keys";
import { createRedisClient } from "../../src/quota/redis";
import { readSse } from "../lib/sse";
import { startStack } from "../stack/start";
import { dist, startBench, summary } from "./harness";

const bench = startBench({ usage: "npm run bench:approvals [N] [--json]", positionals: true });
const N = Number(bench.positionals[0] ?? 100);
const HOSTS = 2;

async function metric(url: string, name: string): Promise<number> {
  const text = await (await fetch(url)).text();
  const line = text.split("\n").find((l) => l.startsWith(`${name}{`) || l.startsWith(`${name} `));
  return line ? Number(line.slice(line.lastIndexOf(" ") + 1)) : Number.NaN;
}

async function main() {
  console.error(`starting a stack with ${HOSTS} hosts…`);
  const stack = await startStack({ hosts: HOSTS, mockModel: { ttftMs: 5, tokensPerS: 2000 } });
  const pool = new pg.Pool({ connectionString: stack.databaseUrl, max: 2 });
  const headers = { authorization: `Bearer ${stack.apiKey}`, "content-type": "application/json" };
  const post = (path: string, body: unknown) =>
    fetch(`${stack.gatewayUrl}${path}`, { method: "POST", headers, body: JSON.stringify(body) });
  try {
    const agent = await post("/v1/agents", {
      name: "bench-gated",
      model: stack.modelName,
      tools: [{ name: "shell", requires_approval: true }],
    });
    if (agent.status !== 201) throw new Error(`agent: ${agent.status} ${await agent.text()}`);
    const content = `!mock ${JSON.stringify({ tool_calls: [{ name: "shell", args: { command: "true" } }] })}`;
    const ids: string[] = [];
    for (let i = 0; i < N; i++) {
      const r = await post("/v1/jobs", { agent: "bench-gated", input: { messages: [{ role: "user", content }] } });
      ids.push(((await r.json()) as { job: { id: string } }).job.id);
    }
    for (;;) {
      const { rows } = await pool.query(
        "select count(*)::int as n from jobs where id = any($1) and state = 'waiting'",
        [ids],
      );
      if (rows[0].n === N) break;
      await sleep(200);
    }
    await sleep(1000);
    const slots = await Promise.all(stack.hosts.map((h) => metric(h.metricsUrl, "runs_active")));
    const held = await Promise.all(stack.hosts.map((h) => metric(h.metricsUrl, "quota_leases_held")));
    const zset = await createRedisClient(stack.upstash).zcard(
      redisKeys().quotaLeases(quotaKeys.model(stack.modelName)),
    );
    bench.say(
      `${N} jobs waiting: runs_active per host ${JSON.stringify(slots)}, quota_leases_held ${JSON.stringify(held)}, lease ZSET ${zset}`,
    );

    const latencies: number[] = [];
    const decideMs: number[] = [];
    for (const id of ids) {
      const { rows } = await pool.query<{ call_id: string }>(
        "select waiting_for->>'call_id' as call_id from jobs where id = $1",
        [id],
      );
      const callId = rows[0]?.call_id as string;
      // The stream is opened first and read up to run.suspended (the replay), so the new
      // execution's first event is read as soon as the projector delivers it.
      const ac = new AbortController();
      const events = readSse(`${stack.gatewayUrl}/v1/jobs/${id}/events`, {
        headers,
        signal: AbortSignal.any([ac.signal, AbortSignal.timeout(30_000)]),
      });
      for (let ev = await events.next(); !ev.done && ev.value.event !== "run.suspended"; ev = await events.next()) {}
      const t0 = performance.now();
      const r = await post(`/v1/jobs/${id}/approvals/${encodeURIComponent(callId)}`, { decision: "approve" });
      decideMs.push(performance.now() - t0);
      if (r.status !== 202) throw new Error(`decision: ${r.status} ${await r.text()}`);
      for (let ev = await events.next(); !ev.done; ev = await events.next()) {
        if (ev.value.event === "run.resumed") {
          latencies.push(performance.now() - t0);
          break;
        }
      }
      ac.abort();
    }
    bench.say(`decision POST answered: ${summary(decideMs)}`);
    bench.say(`resume latency (decision → run.resumed on the stream): ${summary(latencies)}`);
    bench.say(`${bench.load()} (1, 5, 15 min; ${(await import("node:os")).cpus().length} cores)`);
    bench.done({
      jobs: N,
      runs_active: slots,
      quota_leases_held: held,
      lease_zset: zset,
      decision_ms: dist(decideMs),
      resume_ms: dist(latencies),
    });
  } finally {
    await pool.end();
    await stack.stop();
  }
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
