/**
 * `npm run bench:run-cost`: what one run costs in production terms, per text run and per 5-turn
 * tool run, counted on a whole local stack (gateway in workerd, one host, the bridges, Postgres,
 * Redis, the mock model), and priced at list prices (tools/lib/prices.ts):
 *
 * - gateway requests: every request that reached the gateway, the client's (submit, stream,
 *   read-back) and the host's (event ingest, …), counted by a proxy in front of it
 *   (tools/lib/http-counting-proxy.ts), by route;
 * - Durable Object requests: counted for the ingest (one call into a job's object per job an
 *   ingest request names, read from the bodies the proxy forwards); for the other routes taken
 *   from what the code calls per request (a stream open: the tenant's counter to take a slot, the
 *   job's object, the counter again to release it; a submit, a read-back: none), said as such;
 * - Postgres statements: every statement any client sent (the gateway's through the SQL bridge,
 *   the host's), counted on the wire by a proxy in front of Postgres (tools/lib/pg-counting-proxy.ts);
 * - Redis commands as Upstash bills them: every command a client sent (MONITOR; a script's
 *   commands not, its EVALSHA once);
 * - CPU ms of the gateway (the workerd process), of the host, and of Postgres (every backend).
 *
 * Runs go `--concurrency` at a time (1: a lone run pays for the host's loops while it runs; 100:
 * those loops are shared), `--runs` of each kind after two warm-up runs, each checked to complete.
 * `--write-docs` replaces the table in docs/capacity.md between its run-cost markers.
 */
import { readdir, readFile, writeFile } from "node:fs/promises";
import { join, resolve } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { Redis as IORedis } from "ioredis";
import { EarClient } from "../../src/client/client";
import { isTerminalEventType } from "../../src/contracts/events";
import { countingHttpProxy } from "../lib/http-counting-proxy";
import { countingPgProxy } from "../lib/pg-counting-proxy";
import { PRICES } from "../lib/prices";
import { readSse } from "../lib/sse";
import { startPostgres } from "../stack/services/postgres";
import { startRedis } from "../stack/services/redis";
import { startStack } from "../stack/start";
import { startBench, treeCpuSeconds } from "./harness";

const ROOT = resolve(import.meta.dirname, "..", "..");
const DOCS = join(ROOT, "docs", "capacity.md");
export const RUN_COST_BEGIN = "<!-- run-cost:begin (npm run bench:run-cost -- --write-docs) -->";
export const RUN_COST_END = "<!-- run-cost:end -->";

const bench = startBench({
  usage: "npm run bench:run-cost -- [--runs 10] [--concurrency 1,100] [--tool-turns 5] [--write-docs] [--json]",
  options: {
    runs: { type: "string", default: "10" },
    concurrency: { type: "string", default: "1,100" },
    "tool-turns": { type: "string", default: "5" },
    "write-docs": { type: "boolean", default: false },
  },
});
const RUNS = Number(bench.args.runs);
const LEVELS = bench.args.concurrency.split(",").map(Number);
const MAX_LEVEL = Math.max(...LEVELS);
const TOOL_TURNS = Number(bench.args["tool-turns"]);
for (const [name, v] of [
  ["--runs", RUNS],
  ...LEVELS.map((c) => ["--concurrency", c] as const),
  ["--tool-turns", TOOL_TURNS],
] as const) {
  if (!Number.isInteger(v) || v < 1) {
    process.stderr.write(`${name} must be a whole number ≥ 1\n`);
    process.exit(2);
  }
}

type Kind = "text" | "tool";

/** A process's pid whose command line matches, among every process (Linux /proc). */
async function findPid(match: (cmdline: string) => boolean): Promise<number | null> {
  for (const entry of await readdir("/proc")) {
    if (!/^\d+$/.test(entry)) continue;
    const cmd = await readFile(`/proc/${entry}/cmdline`, "utf8").catch(() => "");
    if (match(cmd.replaceAll("\0", " "))) return Number(entry);
  }
  return null;
}

interface Snapshot {
  gateway: number;
  byRoute: Map<string, number>;
  ingestJobs: number;
  ingestEvents: number;
  pgStatements: number;
  redis: number;
  cpu: { gateway: number; host: number; postgres: number };
}

async function main(): Promise<void> {
  bench.say(`bench:run-cost — ${bench.load()} at start`);
  const pgService = await startPostgres();
  const pgProxy = await countingPgProxy({ host: pgService.host, port: pgService.port });
  const proxiedDb = new URL(pgService.url);
  proxiedDb.host = `127.0.0.1:${pgProxy.port}`;
  const redis = await startRedis();
  const stack = await startStack({
    root: ROOT,
    databaseUrl: proxiedDb.toString(),
    redisUrl: redis.url,
    hosts: 0,
    mockModel: { ttftMs: 200, tokensPerS: 50 },
    hostEnv: {
      QUOTA_TENANT_LIMIT: "0",
      HOST_RESERVED_SLOTS: "0",
      HOST_MAX_RUNS: String(Math.max(8, MAX_LEVEL)),
      QUOTA_MODEL_LIMIT: String(Math.max(8, MAX_LEVEL)),
    },
    gatewayVars: {
      RATE_LIMIT_REQUESTS: "1000000",
      MAX_STREAMS_PER_TENANT: "100000",
      MAX_QUEUED_JOBS_PER_TENANT: "100000",
    },
  });
  const gw = await countingHttpProxy(stack.gatewayUrl);
  const direct = new IORedis(redis.url, { protocol: 2 });
  let redisSent = 0;
  const monitor = await direct.monitor();
  monitor.on("monitor", (_time: string, _args: string[], source: string) => {
    if (source !== "lua") redisSent++;
  });
  try {
    const host = await stack.addHost({ GATEWAY_URL: gw.url });
    const hostPid = host.process.pid as number;
    const gatewayPort = new URL(stack.gatewayUrl).port;
    const workerdPid = await findPid((c) => c.includes("workerd") && c.includes(`:${gatewayPort}`));
    const postgresPid = await findPid((c) => /postgres/.test(c) && c.includes(` -p ${pgService.port}`));
    if (!workerdPid || !postgresPid) throw new Error("could not find the workerd or Postgres process in /proc");
    const api = new EarClient({ baseUrl: gw.url, credential: stack.apiKey });

    const snapshot = async (): Promise<Snapshot> => ({
      gateway: gw.counts.requests,
      byRoute: new Map(gw.counts.byRoute),
      ingestJobs: gw.counts.ingestJobs,
      ingestEvents: gw.counts.ingestEvents,
      pgStatements: pgProxy.counts.statements,
      redis: redisSent,
      cpu: {
        gateway: (await treeCpuSeconds(workerdPid)) ?? Number.NaN,
        host: (await treeCpuSeconds(hostPid)) ?? Number.NaN,
        postgres: (await treeCpuSeconds(postgresPid)) ?? Number.NaN,
      },
    });
    const quiet = async () => {
      for (let i = 0; i < 200; i++) {
        const text = await (await fetch(host.metricsUrl)).text();
        if (/^runs_active(\{[^}]*\})? 0$/m.test(text)) break;
        await sleep(100);
      }
      await sleep(1_000); // trailing acks and heartbeats of the last run belong to it
    };

    const oneRun = async (kind: Kind, i: number) => {
      const reply = `cost ${kind} ${i}: ${Array.from({ length: 40 }, (_, k) => `w${k}`).join(" ")}`;
      const script =
        kind === "text"
          ? { reply }
          : { reply, tool_calls: [{ name: "shell", args: { command: `echo ${i}` } }], tool_turns: TOOL_TURNS - 1 };
      const { job } = await api.submit({
        input: { messages: [{ role: "user", content: `!mock ${JSON.stringify(script)}` }] },
        ...(kind === "tool" ? { tools: ["shell"] } : {}),
      });
      let terminal: string | null = null;
      for await (const ev of readSse(`${gw.url}/v1/jobs/${job.id}/events`, {
        headers: { authorization: `Bearer ${stack.apiKey}` },
        signal: AbortSignal.timeout(120_000),
      })) {
        if (isTerminalEventType(ev.event)) terminal = ev.event;
      }
      const done = (await api.get(job.id)).job;
      if (terminal !== "run.completed" || done.state !== "completed" || done.output !== reply) {
        throw new Error(`${kind} run ${job.id} did not complete as scripted (${terminal}, ${done.state})`);
      }
    };
    const batch = async (kind: Kind, n: number, concurrency = 1) => {
      let next = 0;
      await Promise.all(
        Array.from({ length: Math.min(concurrency, n) }, async () => {
          while (next < n) await oneRun(kind, next++);
        }),
      );
    };

    bench.say("warm-up: 2 runs of each kind");
    await batch("text", 2);
    await batch("tool", 2);
    await quiet();
    const idle0 = await snapshot();
    const idleS = 5;
    await sleep(idleS * 1000);
    const idle1 = await snapshot();

    const rows: Array<Record<string, number | string>> = [];
    for (const concurrency of LEVELS)
      for (const kind of ["text", "tool"] as const) {
        // A level of C runs at once is max(--runs, C) runs, C at a time.
        const runs = Math.max(RUNS, concurrency);
        await quiet();
        const a = await snapshot();
        const t0 = performance.now();
        await batch(kind, runs, concurrency);
        await quiet();
        const b = await snapshot();
        const per = (x: number) => x / runs;
        const streams = per(
          (b.byRoute.get("GET /v1/jobs/{id}/events") ?? 0) - (a.byRoute.get("GET /v1/jobs/{id}/events") ?? 0),
        );
        const ingestJobs = per(b.ingestJobs - a.ingestJobs);
        const row = {
          kind: kind === "text" ? "text (40 tokens)" : `tool (${TOOL_TURNS} turns, ${TOOL_TURNS - 1} shell calls)`,
          runs,
          concurrency,
          wall_s: Math.round((performance.now() - t0) / 100) / 10,
          gateway_requests: per(b.gateway - a.gateway),
          ingest_requests: per(
            (b.byRoute.get("POST /internal/events") ?? 0) - (a.byRoute.get("POST /internal/events") ?? 0),
          ),
          events: per(b.ingestEvents - a.ingestEvents),
          do_requests: ingestJobs + 3 * streams,
          pg_statements: per(b.pgStatements - a.pgStatements),
          redis_commands: per(b.redis - a.redis),
          gateway_cpu_ms: per((b.cpu.gateway - a.cpu.gateway) * 1000),
          host_cpu_ms: per((b.cpu.host - a.cpu.host) * 1000),
          postgres_cpu_ms: per((b.cpu.postgres - a.cpu.postgres) * 1000),
        };
        rows.push(row);
        const routes = [...b.byRoute]
          .map(([r, n]) => [r, (n - (a.byRoute.get(r) ?? 0)) / runs] as const)
          .filter(([, n]) => n > 0)
          .map(([r, n]) => `${r} ${n.toFixed(1)}`);
        bench.say(
          `${kind} × ${runs}, ${concurrency} at a time: gateway requests per run by route: ${routes.join(", ")}`,
        );
      }

    const usd = (r: Record<string, number | string>) => {
      const n = (k: string) => Number(r[k]);
      return {
        workers:
          (n("gateway_requests") * PRICES.workersPerMillionRequests +
            n("gateway_cpu_ms") * PRICES.workersPerMillionCpuMs) /
          1e6,
        durable_objects: (n("do_requests") * PRICES.durableObjectsPerMillionRequests) / 1e6,
        // Neon bills the hours its compute is up, not the CPU a statement uses: this is the
        // Postgres CPU a run took, priced as compute time of a fully used 1-CU compute (a floor).
        neon: (n("postgres_cpu_ms") / 3_600_000) * PRICES.neonPerCuHour,
        upstash: (n("redis_commands") * PRICES.upstashPer100kCommands) / 100_000,
      };
    };
    const fmt = (x: number, d = 1) => x.toFixed(d);
    const head = [
      "run",
      "at once",
      "gateway requests (of them ingest)",
      "events",
      "DO requests",
      "Postgres statements",
      "Redis commands",
      "CPU ms gateway / host / Postgres",
      "$ per million runs: Workers / DO / Neon / Upstash = total",
    ];
    const lines = rows.map((r) => {
      const p = usd(r);
      const total = p.workers + p.durable_objects + p.neon + p.upstash;
      return [
        String(r.kind),
        String(r.concurrency),
        `${fmt(Number(r.gateway_requests))} (${fmt(Number(r.ingest_requests))})`,
        fmt(Number(r.events)),
        fmt(Number(r.do_requests)),
        fmt(Number(r.pg_statements)),
        fmt(Number(r.redis_commands)),
        `${fmt(Number(r.gateway_cpu_ms))} / ${fmt(Number(r.host_cpu_ms))} / ${fmt(Number(r.postgres_cpu_ms))}`,
        `${fmt(p.workers * 1e6, 2)} / ${fmt(p.durable_objects * 1e6, 2)} / ${fmt(p.neon * 1e6, 2)} / ${fmt(p.upstash * 1e6, 2)} = **${fmt(total * 1e6, 2)}**`,
      ];
    });
    bench.table([head, ...lines]);
    const idle = {
      pg_statements_per_s: (idle1.pgStatements - idle0.pgStatements) / idleS,
      redis_commands_per_s: (idle1.redis - idle0.redis) / idleS,
      gateway_requests_per_s: (idle1.gateway - idle0.gateway) / idleS,
    };
    const idleLine = `idle between batches (${idleS} s): ${idle.pg_statements_per_s.toFixed(1)} statements/s, ${idle.redis_commands_per_s.toFixed(1)} Redis commands/s, ${idle.gateway_requests_per_s.toFixed(1)} gateway requests/s`;
    bench.say(idleLine);
    const loadLine = `max(${RUNS}, N) runs of each kind N at a time, after 2 warm-up runs; ${bench.load()} at the end`;
    bench.say(loadLine);
    bench.say(`prices: ${PRICES.source}`);

    if (bench.args["write-docs"]) {
      const md = [
        RUN_COST_BEGIN,
        "",
        `| ${head.join(" | ")} |`,
        `|${head.map(() => "---").join("|")}|`,
        ...lines.map((l) => `| ${l.join(" | ")} |`),
        "",
        `${loadLine}; ${idleLine}. Prices: ${PRICES.source}.`,
        "",
        RUN_COST_END,
      ].join("\n");
      const doc = await readFile(DOCS, "utf8");
      const at = doc.indexOf(RUN_COST_BEGIN);
      const end = doc.indexOf(RUN_COST_END);
      if (at < 0 || end < at)
        throw new Error(`docs/capacity.md has no run-cost markers (${RUN_COST_BEGIN} … ${RUN_COST_END})`);
      await writeFile(DOCS, doc.slice(0, at) + md + doc.slice(end + RUN_COST_END.length));
      bench.say("docs/capacity.md: the run-cost table was rewritten");
    }
    bench.done({ rows: rows.map((r) => ({ ...r, usd_per_run: usd(r) })), idle, prices: PRICES });
  } finally {
    monitor.disconnect();
    direct.disconnect();
    await gw.close();
    await stack.stop();
    pgProxy.close();
    await redis.stop();
    await pgService.stop();
  }
}

main().then(
  () => process.exit(0),
  (err: unknown) => {
    process.stderr.write(`bench:run-cost failed: ${(err as Error).stack ?? err}\n`);
    process.exit(1);
  },
);
