/**
 * `npm run bench:cancel`: cancel convergence and the Redis cost of watching for cancels.
 *
 *  1. N running jobs (default 100, on 2 hosts) each streaming a long scripted answer; every job
 *     is cancelled through the API; per job we measure API call → durable `cancelled` (polled in
 *     Postgres every 5 ms, one query for all jobs) and API call → its SSE stream closed after
 *     `run.cancelled`. Prints p50 / p95 / max.
 *  2. Redis commands per second per host (Redis INFO total_commands_processed deltas over 3 s)
 *     with 0, 10 and N running jobs: batched hint checks make it constant in the number of runs,
 *     where a per-run poll would be ~5 per run per second.
 */
import { monitorEventLoopDelay } from "node:perf_hooks";
import pg from "pg";
import { sleep } from "../../src/domain/async";
import { readSse } from "../lib/sse";
import { RespInfo } from "../load/resp";
import { type Stack, startStack } from "../stack/start";
import { dist, startBench, summary } from "./harness";

const bench = startBench({ usage: "npm run bench:cancel [N] [--json]", positionals: true });
const N = Number(bench.positionals[0] ?? 100);
const HOSTS = 2;
/**
 * CANCEL_OVER_S (default 2): the N cancels are spread over this many seconds. Above 2 s each
 * cancelled job is replaced by a new running one as it is cancelled, so about N jobs keep running
 * while cancels arrive at a steady N / CANCEL_OVER_S per second (the burst default measures how
 * the stack queues 50 cancels a second; a steady rate measures one cancel among N running jobs).
 */
const SPREAD_MS = Number(process.env.CANCEL_OVER_S ?? 2) * 1000;
const REPLACE = SPREAD_MS > 2000;

async function commandsPerSecond(stack: Stack, seconds = 3): Promise<number> {
  const redis = new RespInfo(stack.redisUrl as string);
  try {
    const a = Number((await redis.info("stats")).total_commands_processed);
    await sleep(seconds * 1000);
    const b = Number((await redis.info("stats")).total_commands_processed);
    // Less this connection's own INFO (one command between the two readings).
    return (b - a - 1) / seconds;
  } finally {
    redis.close();
  }
}

async function main() {
  console.error(`starting a stack with ${HOSTS} hosts…`);
  const stack = await startStack({
    hosts: HOSTS,
    hostEnv: { HOST_MAX_RUNS: String(Math.ceil(N / HOSTS) + 4), QUOTA_MODEL_LIMIT: "0", HOST_IDLE_POLL_MS: "250" },
  });
  const pool = new pg.Pool({ connectionString: stack.databaseUrl, max: 4 });
  const headers = { authorization: `Bearer ${stack.apiKey}`, "content-type": "application/json" };
  const long = {
    input: { messages: [{ role: "user", content: `!mock ${JSON.stringify({ tokens: 100000, tokens_per_s: 2 })}` }] },
  };
  try {
    const idle = await commandsPerSecond(stack);
    const submitMany = async (n: number) => {
      const ids: string[] = [];
      for (let i = 0; i < n; i++) {
        const r = await fetch(`${stack.gatewayUrl}/v1/jobs`, { method: "POST", headers, body: JSON.stringify(long) });
        const body = (await r.json()) as { job?: { id: string } };
        if (!body.job) throw new Error(`submit: HTTP ${r.status} ${JSON.stringify(body)}`);
        ids.push(body.job.id);
      }
      for (;;) {
        const r = await pool.query("select count(*)::int n from jobs where id = any($1) and state = 'running'", [ids]);
        if (r.rows[0].n === n) return ids;
        await sleep(50);
      }
    };
    const ten = await submitMany(10);
    await sleep(1000);
    const with10 = await commandsPerSecond(stack);
    const rest = await submitMany(N - 10);
    const ids = [...ten, ...rest];
    await sleep(1000);
    const withN = await commandsPerSecond(stack);

    // Open one SSE stream per job and read it to the end in the background.
    const closedAt = new Map<string, number>();
    // Like a real client: a dropped stream resumes from its last id. NO_STREAMS=1 measures the
    // cancel path alone, without 100 open SSE streams through the gateway.
    const streams = process.env.NO_STREAMS
      ? []
      : ids.map(async (id) => {
          let last = 0;
          for (let attempt = 0; attempt < 20 && !closedAt.has(id); attempt++) {
            try {
              for await (const ev of readSse(`${stack.gatewayUrl}/v1/jobs/${id}/events`, {
                headers: { ...headers, "last-event-id": String(last) },
                signal: AbortSignal.timeout(120_000),
              })) {
                last = Number(ev.id ?? last);
                if (ev.event === "run.cancelled") closedAt.set(id, performance.now());
              }
            } catch {
              await sleep(100);
            }
          }
        });
    await sleep(1000);

    const calledAt = new Map<string, number>();
    const answeredAt = new Map<string, number>();
    const cancelledAt = new Map<string, number>();
    let stop = false;
    const watcher = (async () => {
      while (!stop && cancelledAt.size < ids.length) {
        const r = await pool.query("select id from jobs where id = any($1) and state = 'cancelled'", [ids]);
        const now = performance.now();
        for (const row of r.rows) if (!cancelledAt.has(row.id)) cancelledAt.set(row.id, now);
        await sleep(5);
      }
    })().catch((err: unknown) => {
      // Once a cancel failed, the run is over and the pool goes away: that error is the news.
      if (!stop) throw err;
    });
    // This process reads the SSE streams (the bridges and the mock model run in processes of
    // their own): its loop delay during the cancels says whether the measuring side is part of the figure.
    const loopDelay = monitorEventLoopDelay({ resolution: 10 });
    loopDelay.enable();
    // Cancel them spread over SPREAD_MS so the numbers are not one synchronized burst.
    const replacements: Promise<unknown>[] = [];
    await Promise.all(
      ids.map(async (id, i) => {
        await sleep((i * SPREAD_MS) / ids.length);
        calledAt.set(id, performance.now());
        if (REPLACE) {
          replacements.push(
            fetch(`${stack.gatewayUrl}/v1/jobs`, { method: "POST", headers, body: JSON.stringify(long) }).then((r) =>
              r.text(),
            ),
          );
        }
        // A saturated gateway may answer 503 ("try again shortly"): retry like a client would;
        // the convergence clock keeps running from the first attempt.
        let r = await fetch(`${stack.gatewayUrl}/v1/jobs/${id}/cancel`, { method: "POST", headers });
        for (let attempt = 1; r.status === 503 && attempt < 5; attempt++) {
          await r.text();
          await sleep(100 * attempt);
          r = await fetch(`${stack.gatewayUrl}/v1/jobs/${id}/cancel`, { method: "POST", headers });
        }
        answeredAt.set(id, performance.now());
        if (r.status !== 202) {
          stop = true;
          throw new Error(`cancel ${id}: HTTP ${r.status} ${await r.text()}`);
        }
      }),
    );
    await watcher;
    loopDelay.disable();
    await Promise.all(streams);
    await Promise.all(replacements);

    const durable = ids.map((id) => (cancelledAt.get(id) as number) - (calledAt.get(id) as number));
    const closed = ids.map((id) => (closedAt.get(id) ?? Number.NaN) - (calledAt.get(id) as number));
    bench.say(
      `\ncancel convergence over ${N} running jobs on ${HOSTS} hosts, cancels spread over ${SPREAD_MS / 1000} s${REPLACE ? " (each replaced by a new running job)" : ""}`,
    );
    const answered = ids.map((id) => (answeredAt.get(id) as number) - (calledAt.get(id) as number));
    bench.say(`  API call → API answered:        ${summary(answered)}`);
    bench.say(`  API call → durable cancelled:   ${summary(durable)}`);
    bench.say(`  API call → stream ended:        ${summary(closed.filter(Number.isFinite))}`);
    const ms = (ns: number) => (ns / 1e6).toFixed(0);
    bench.say(
      `  this process's event-loop delay during the cancels (SSE readers): p50 ${ms(loopDelay.percentile(50))} ms, p99 ${ms(loopDelay.percentile(99))} ms, max ${ms(loopDelay.max)} ms`,
    );
    bench.say(`\nRedis commands per second per host (whole Redis / ${HOSTS} hosts)`);
    bench.say(`  0 running jobs:   ${(idle / HOSTS).toFixed(1)}`);
    bench.say(`  10 running jobs:  ${(with10 / HOSTS).toFixed(1)}`);
    bench.say(
      `  ${N} running jobs: ${(withN / HOSTS).toFixed(1)}   (a per-run 200 ms poll would add ~${(5 * N) / HOSTS}/s per host)`,
    );
    bench.say(bench.load());
    bench.done({
      jobs: N,
      hosts: HOSTS,
      spread_s: SPREAD_MS / 1000,
      answered_ms: dist(answered),
      durable_ms: dist(durable),
      stream_ended_ms: dist(closed),
      redis_commands_per_s_per_host: { idle: idle / HOSTS, runs_10: with10 / HOSTS, [`runs_${N}`]: withN / HOSTS },
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
