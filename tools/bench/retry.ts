/**
 * `npm run bench:retry` — provider errors and usage, measured: N jobs (default 200) on one
 * in-process sandbox-host against the mock model failing a share of requests (default 20 %,
 * 429 with `Retry-After: 1` and 503 without, equally) before any output. Reports how many jobs
 * completed, the retries (count by reason, p50/p95/max of the wait, from the `model.retry`
 * events), and the usage the host recorded (jobs' sums and model_usage rows) against what the
 * provider reported in its usage chunks (the mock's ledger).
 *
 * Real Postgres (embedded), redis-server behind the Upstash bridge, the host's real runner,
 * quota and retry code with its default MODEL_RETRY_* policy. The gateway is replaced by a small
 * ingest that acknowledges each batch and keeps the events: the figures are the host's, and
 * delivering events through workerd would only add noise on a shared machine.
 *
 *   npm run bench:retry -- [--jobs 200] [--fail-rate 0.2] [--max-runs 16] [--json]
 */
import { randomUUID } from "node:crypto";
import { eq, sql } from "drizzle-orm";
import { drizzle } from "drizzle-orm/node-postgres";
import pg from "pg";
import { startHost } from "../../sandbox-host/host";
import { HostConfigSchema } from "../../sandbox-host/host-config";
import { silentLogger } from "../../sandbox-host/log";
import { createOpenAICompatibleClient } from "../../sandbox-host/model/openai-compatible";
import * as schema from "../../src/db/schema";
import { sleep } from "../../src/domain/async";
import { startUpstashBridge } from "../bridges/upstash-rest/main";
import { MOCK_MODEL_NAME, startMockModel } from "../mock-model/main";
import { applyMigrations } from "../stack/migrate";
import { startAckingIngest } from "../stack/services/acking-ingest";
import { startPostgres } from "../stack/services/postgres";
import { startRedis } from "../stack/services/redis";
import { dist, loadAverage, startBench } from "./harness";

const bench = startBench({
  usage: "npm run bench:retry -- [--jobs 200] [--fail-rate 0.2] [--max-runs 16] [--json]",
  options: {
    jobs: { type: "string", default: "200" },
    "fail-rate": { type: "string", default: "0.2" },
    "max-runs": { type: "string", default: "16" },
  },
});
const args = bench.args;
const JOBS = Number(args.jobs);
const FAIL_RATE = Number(args["fail-rate"]);
const MAX_RUNS = Number(args["max-runs"]);
const TENANT = "bench-retry";

async function main(): Promise<void> {
  const stops: Array<() => Promise<unknown>> = [];
  try {
    const postgres = await startPostgres();
    stops.push(() => postgres.stop());
    await applyMigrations(postgres.url);
    const redis = await startRedis();
    stops.push(() => redis.stop());
    const bridge = await startUpstashBridge({ redisUrl: redis.url, token: "bench-retry-token", log: () => {} });
    stops.push(() => bridge.close());
    const mock = await startMockModel({
      failRate: FAIL_RATE,
      failStatuses: [429, 503],
      failRetryAfterS: 1,
      defaultTtftMs: 50,
      defaultTokensPerS: 400,
    });
    stops.push(() => mock.close());
    const ingest = await startAckingIngest();
    stops.push(() => ingest.close());

    const pool = new pg.Pool({ connectionString: postgres.url, max: 4 });
    stops.push(() => pool.end());
    const db = drizzle(pool, { schema });
    await db.insert(schema.tenants).values({ id: TENANT, name: "retry bench" });

    // The host's defaults, as an operator gets them (retry policy and quota included).
    const config = HostConfigSchema.parse({
      hostId: `bench-retry-${randomUUID().slice(0, 8)}`,
      databaseUrl: postgres.url,
      redis: { url: bridge.url, token: "bench-retry-token" },
      gatewayUrl: ingest.url,
      signingSecret: "bench-retry-signing-secret-0123456789",
      maxRuns: MAX_RUNS,
      shutdownGraceMs: 0,
    });
    const host = await startHost(config, {
      model: createOpenAICompatibleClient({ baseUrl: mock.url, apiKey: "mock", model: MOCK_MODEL_NAME }),
      modelName: MOCK_MODEL_NAME,
      log: silentLogger,
      sandbox: null,
    });
    stops.push(() => host.close({ graceMs: 0 }));

    const t0 = performance.now();
    const ids: string[] = [];
    for (let i = 0; i < JOBS; i++) {
      const id = randomUUID();
      ids.push(id);
      await db.insert(schema.jobs).values({
        id,
        tenantId: TENANT,
        input: { messages: [{ role: "user", content: `!mock {"tokens": ${20 + (i % 30)}}` }] },
      });
    }
    for (;;) {
      const [row] = await db
        .select({ open: sql<number>`count(*) filter (where state in ('queued', 'running'))::int` })
        .from(schema.jobs);
      if ((row?.open ?? 1) === 0) break;
      if (performance.now() - t0 > 15 * 60_000) throw new Error("jobs did not finish within 15 minutes");
      await sleep(200);
    }
    const wallS = (performance.now() - t0) / 1000;
    // Let the outbox deliver the last events.
    await sleep(1500);

    const states = await db
      .select({ state: schema.jobs.state, code: sql<string | null>`error->>'code'`, n: sql<number>`count(*)::int` })
      .from(schema.jobs)
      .groupBy(schema.jobs.state, sql`error->>'code'`);
    const [jobSums] = await db
      .select({
        prompt: sql<number>`sum(prompt_tokens)::int`,
        completion: sql<number>`sum(completion_tokens)::int`,
        calls: sql<number>`sum(model_calls)::int`,
        estimated: sql<number>`count(*) filter (where usage_estimated)::int`,
      })
      .from(schema.jobs)
      .where(eq(schema.jobs.tenantId, TENANT));
    const [usageRows] = await db
      .select({
        rows: sql<number>`count(*)::int`,
        prompt: sql<number>`sum(prompt_tokens)::int`,
        completion: sql<number>`sum(completion_tokens)::int`,
        estimated: sql<number>`count(*) filter (where estimated)::int`,
      })
      .from(schema.modelUsage);
    const retries = ingest.events.filter((e) => e.type === "model.retry");
    const payloads = retries.map((e) => e.payload as { delay_ms: number; reason: string; status: number | null });
    const byReason = (reason: string, status: number | null) =>
      dist(payloads.filter((p) => p.reason === reason && p.status === status).map((p) => p.delay_ms));
    const ledger = mock.stats();
    const figures = {
      jobs: JOBS,
      fail_rate: FAIL_RATE,
      max_runs: MAX_RUNS,
      wall_s: Math.round(wallS * 10) / 10,
      outcomes: Object.fromEntries(states.map((s) => [`${s.state}${s.code ? `:${s.code}` : ""}`, s.n])),
      provider: {
        requests: ledger.requests,
        injected_failures: ledger.injected_failures,
        usage_reported: ledger.usage_reported,
      },
      retries: {
        count: retries.length,
        jobs_retried: new Set(retries.map((e) => e.job_id)).size,
        delay_ms_all: dist(payloads.map((p) => p.delay_ms)),
        delay_ms_429_retry_after: byReason("rate_limited", 429),
        delay_ms_503_backoff: byReason("provider_error", 503),
      },
      recorded: {
        jobs: jobSums,
        model_usage: usageRows,
      },
      usage_matches_provider:
        jobSums?.prompt === ledger.usage_reported.prompt_tokens &&
        jobSums?.completion === ledger.usage_reported.completion_tokens &&
        usageRows?.prompt === ledger.usage_reported.prompt_tokens &&
        usageRows?.completion === ledger.usage_reported.completion_tokens &&
        usageRows?.rows === ledger.usage_reported.calls,
    };
    bench.say(`retry bench: ${JOBS} jobs, provider failing ${FAIL_RATE * 100} % (429 + Retry-After 1 s / 503)`);
    bench.say(`  outcomes            ${JSON.stringify(figures.outcomes)} in ${figures.wall_s} s`);
    bench.say(`  provider requests   ${ledger.requests}, injected ${JSON.stringify(ledger.injected_failures)}`);
    bench.say(
      `  retries             ${retries.length} on ${figures.retries.jobs_retried} jobs; wait ms p50/p95/max: all ${fmt(figures.retries.delay_ms_all)}, 429 ${fmt(figures.retries.delay_ms_429_retry_after)}, 503 ${fmt(figures.retries.delay_ms_503_backoff)}`,
    );
    bench.say(
      `  usage               provider reported ${ledger.usage_reported.prompt_tokens}/${ledger.usage_reported.completion_tokens} (prompt/completion) in ${ledger.usage_reported.calls} calls; jobs sum ${jobSums?.prompt}/${jobSums?.completion} in ${jobSums?.calls} calls; model_usage ${usageRows?.prompt}/${usageRows?.completion} in ${usageRows?.rows} rows, ${usageRows?.estimated} estimated → ${figures.usage_matches_provider ? "match" : "MISMATCH"}`,
    );
    bench.say(`  loadavg             ${loadAverage().join(" ")} (2 cores shared: noisy)`);
    bench.done(figures);
  } finally {
    for (const stop of stops.reverse()) await stop().catch(() => {});
  }
}

function fmt(d: { p50: number | null; p95: number | null; max: number | null }): string {
  return `${d.p50 ?? "-"}/${d.p95 ?? "-"}/${d.max ?? "-"}`;
}

main().catch((err: unknown) => {
  console.error(err);
  process.exit(1);
});
