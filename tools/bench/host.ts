/**
 * `npm run bench:host`: what one run costs a sandbox-host. One real host process (the production
 * bundle, tools/build/host.ts), embedded Postgres, redis-server behind the Upstash REST bridge,
 * the mock model, and an ingest that acks like the projector. For 1, 10 and 100 concurrent runs
 * (text, and tool runs with a Docker sandbox each when an engine answers), repeated:
 *
 * - host CPU ms per run: the process's utime + stime (/proc/<pid>/stat, every thread) over the
 *   batch, divided by the runs; also with the idle rate (measured first) taken out;
 * - RSS per concurrent run: peak VmRSS during the batch minus VmRSS before it, over the runs;
 * - Redis commands per run, as Upstash bills them: every command a client sent (MONITOR), a
 *   script's EVALSHA counting once and the commands inside it not at all;
 * - Postgres statements and round trips per run: counted on the wire by a proxy between the host
 *   and Postgres (simple-query `Q` and extended `Execute` messages; `Q` and `Sync` for trips);
 * - ingest requests per run, and each run's latency from insert to its terminal event.
 *
 * Jobs are inserted straight into Postgres (the insert's NOTIFY wakes the host as a submit's
 * does): the gateway is not part of a host's cost. `--cpu-prof DIR` runs the host under
 * `node --cpu-prof` for the 100-run text batches and prints where its CPU went.
 *
 * Figures are medians with p95 over the repetitions (per-run latency: over all runs), printed
 * with the machine's load average: on a shared 2-core machine they are an upper bound.
 */
import { spawn } from "node:child_process";
import { randomUUID } from "node:crypto";
import { mkdir, readdir, readFile } from "node:fs/promises";
import { join, resolve } from "node:path";
import { createInterface } from "node:readline";
import { drizzle } from "drizzle-orm/node-postgres";
import { Redis as IORedis } from "ioredis";
import pg from "pg";
import { connectDocker } from "../../sandbox-host/sandbox/docker";
import { LABEL_HOST } from "../../sandbox-host/sandbox/manager";
import * as schema from "../../src/db/schema";
import { startUpstashBridge } from "../bridges/upstash-rest/main";
import { buildHost } from "../build/host";
import { LOCAL_SANDBOX_IMAGE } from "../build/sandbox-image";
import { countingPgProxy } from "../lib/pg-counting-proxy";
import { MOCK_MODEL_NAME } from "../mock-model/main";
import { applyMigrations } from "../stack/migrate";
import { startAckingIngest } from "../stack/services/acking-ingest";
import { startPostgres } from "../stack/services/postgres";
import { killOnExit, stopProcessGroup } from "../stack/services/process";
import { startRedis } from "../stack/services/redis";
import { type HostHandle, spawnHost } from "../stack/start";
import { loadAverage, pct, startBench } from "./harness";
import { measureGateway, type RouteCost } from "./host-gateway";

const ROOT = resolve(import.meta.dirname, "..", "..");
const TENANT = "bench-host";
const bench = startBench({
  usage:
    "npm run bench:host -- [--runs 1,10,100] [--tool-runs 1,10] [--kinds text,tool] [--tracing] [--cpu-prof DIR] [--prof-runs 100] [--skip-gateway] [--json]",
  options: {
    runs: { type: "string", default: "1,10,100" },
    "tool-runs": { type: "string", default: "1,10" },
    kinds: { type: "string", default: "text,tool" },
    "cpu-prof": { type: "string" },
    /** Concurrent text runs per profiled batch (3 batches). */
    "prof-runs": { type: "string", default: "100" },
    /** Skip the gateway's CPU per route (it starts a whole stack of its own). */
    "skip-gateway": { type: "boolean", default: false },
    /**
     * Run the text batches again on a second host with OpenTelemetry on (OTLP/HTTP json to a
     * counting receiver here), after the untraced host: tracing's CPU and spans per run.
     */
    tracing: { type: "boolean", default: false },
  },
});
const args = bench.args;
const sizes = (s: string) =>
  s
    .split(",")
    .map(Number)
    .filter((n) => n > 0);
/** Repetitions per batch size: enough for a median and a p95 without a 100-run batch taking minutes. */
const repsFor = (n: number) => (n === 1 ? 9 : n === 10 ? 5 : 3);
const MAX_RUNS = 100;
const REPLY = Array.from({ length: 100 }, (_, i) => `word${i}`).join(" ");

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const load = () => loadAverage().join(" / ");

/** utime + stime of a process (all its threads), in ms. */
async function cpuMs(pid: number): Promise<number> {
  const stat = await readFile(`/proc/${pid}/stat`, "utf8");
  const f = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
  // Fields 14 and 15 of proc(5), counted from the state field (3): clock ticks of 10 ms.
  return (Number(f[11]) + Number(f[12])) * 10;
}

async function rssMiB(pid: number): Promise<number> {
  const status = await readFile(`/proc/${pid}/status`, "utf8");
  return Number(/VmRSS:\s+(\d+)/.exec(status)?.[1] ?? 0) / 1024;
}

/** Acks like the projector; resolves a job's waiter on its terminal event; counts requests. */
async function ingestServer() {
  const waiters = new Map<string, (at: number) => void>();
  const stats = { requests: 0, events: 0 };
  const ingest = await startAckingIngest({
    onRequest: () => stats.requests++,
    onEvent: (e, jobId) => {
      stats.events++;
      if (e.type.startsWith("run.") && !["run.started", "run.prepared"].includes(e.type)) {
        waiters.get(jobId)?.(performance.now());
        waiters.delete(jobId);
      }
    },
  });
  return {
    url: ingest.url,
    stats,
    terminal: (jobId: string) => new Promise<number>((r) => waiters.set(jobId, r)),
    close: () => void ingest.close(),
  };
}

type Q = { p50: number; p95: number };
interface Row {
  kind: string;
  runs: number;
  reps: number;
  cpuMsPerRun: Q;
  cpuMsPerRunNet: Q;
  rssMiBPerRun: Q;
  redisPerRun: Q;
  pgStatementsPerRun: Q;
  pgTripsPerRun: Q;
  ingestPerRun: Q;
  latencyMs: Q;
  load: string;
}

/** An OTLP/HTTP json receiver that only counts the spans it is sent (for --tracing). */
async function spanCounter(): Promise<{
  url: string;
  readonly spans: number;
  readonly requests: number;
  close(): void;
}> {
  const { createServer } = await import("node:http");
  let spans = 0;
  let requests = 0;
  const server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on("data", (c: Buffer) => chunks.push(c));
    req.on("end", () => {
      requests++;
      try {
        const doc = JSON.parse(Buffer.concat(chunks).toString("utf8")) as {
          resourceSpans?: Array<{ scopeSpans?: Array<{ spans?: unknown[] }> }>;
        };
        for (const rs of doc.resourceSpans ?? []) for (const ss of rs.scopeSpans ?? []) spans += ss.spans?.length ?? 0;
      } catch {}
      res.writeHead(200, { "content-type": "application/json" }).end("{}");
    });
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  const port = (server.address() as { port: number }).port;
  return {
    url: `http://127.0.0.1:${port}`,
    get spans() {
      return spans;
    },
    get requests() {
      return requests;
    },
    close: () => void server.close(),
  };
}

/** tools/mock-model/main.ts as a child process; resolves once it printed its URL. */
async function spawnMockModel(): Promise<{ url: string; close(): Promise<void> }> {
  const child = spawn(
    process.execPath,
    ["--import", "tsx", join(ROOT, "tools", "mock-model", "main.ts"), "--ttft-ms", "200", "--tokens-per-s", "50"],
    { cwd: ROOT, detached: true, stdio: ["ignore", "pipe", "inherit"] },
  );
  killOnExit(child, { group: true });
  const url = await new Promise<string>((ok, fail) => {
    createInterface({ input: child.stdout as NodeJS.ReadableStream }).once("line", (line) => ok(line.trim()));
    child.once("exit", (code) => fail(new Error(`mock model exited (${code})`)));
  });
  return { url, close: () => stopProcessGroup(child, 2000) };
}

interface Sample {
  /** Per run, by Redis command and by statement text (this batch, idle traffic included). */
  breakdown: { redis: string[]; postgres: string[] };
  cpuPerRunMs: number;
  cpuPerRunNetMs: number;
  rssPerRunMiB: number;
  redisPerRun: number;
  pgStatementsPerRun: number;
  pgTripsPerRun: number;
  ingestPerRun: number;
  latenciesMs: number[];
  wallMs: number;
}

async function main(): Promise<void> {
  const kinds = args.kinds.split(",");
  const log = (line: string) => process.stderr.write(`${line}\n`);
  log(`bench:host — load average at start ${load()} (2-core machine shared with other work)`);

  const pgService = await startPostgres();
  const redis = await startRedis();
  const bridge = await startUpstashBridge({ redisUrl: redis.url, token: randomUUID(), log: () => {} });
  // The mock model in a process of its own: streaming 100 replies at once is more work than the
  // host under test does, and in this process it slowed the ingest answers the host batches on.
  const mock = await spawnMockModel();
  const ingest = await ingestServer();
  const direct = new IORedis(redis.url, { protocol: 2 });
  await applyMigrations(pgService.url);
  const pool = new pg.Pool({ connectionString: pgService.url, max: 2 });
  const db = drizzle(pool, { schema });
  await db.insert(schema.tenants).values({ id: TENANT, name: "bench:host" });
  const pgProxy = await countingPgProxy({ host: pgService.host, port: pgService.port });
  const hostUrl = new URL(pgService.url);
  hostUrl.host = `127.0.0.1:${pgProxy.port}`;
  const bundle = (await buildHost(join(ROOT, ".tmp", "bench-host"))).main;
  const docker = connectDocker();
  const dockerUp = await docker.ping().then(
    () => true,
    () => false,
  );

  const hostEnv = (hostId: string): Record<string, string> => ({
    HOST_ID: hostId,
    DATABASE_URL: hostUrl.toString(),
    UPSTASH_REDIS_REST_URL: bridge.url,
    UPSTASH_REDIS_REST_TOKEN: bridge.token,
    GATEWAY_URL: ingest.url,
    INTERNAL_SIGNING_SECRET: randomUUID().repeat(2),
    MODEL_BASE_URL: mock.url,
    MODEL_API_KEY: "mock",
    MODEL_NAME: MOCK_MODEL_NAME,
    HOST_METRICS_PORT: "0",
    HOST_MAX_RUNS: String(MAX_RUNS),
    // What a run costs, not how it queues: every run gets its model slot at once.
    QUOTA_MODEL_LIMIT: String(MAX_RUNS),
    QUOTA_TENANT_LIMIT: "0",
    // Every batch's sandboxes are created at once and measured as such: the bound on concurrent
    // creations is the overload guard (docs/capacity.md), not part of a run's cost.
    SANDBOX_CREATE_QUEUE: "4096",
    SANDBOX_IMAGE: LOCAL_SANDBOX_IMAGE,
    SANDBOX_ENABLED: String(dockerUp),
  });

  let redisSent = 0;
  const redisByCommand = new Map<string, number>();
  const monitor = await direct.monitor();
  monitor.on("monitor", (_time: string, args: string[], source: string) => {
    if (source === "lua") return;
    redisSent++;
    const name = String(args[0]).toLowerCase();
    redisByCommand.set(name, (redisByCommand.get(name) ?? 0) + 1);
  });
  const redisCommands = async (): Promise<number> => redisSent;

  async function startBenchHost(profileDir?: string, extraEnv: Record<string, string> = {}): Promise<HostHandle> {
    const hostId = `bench-${randomUUID().slice(0, 8)}`;
    const argv = profileDir ? ["--cpu-prof", "--cpu-prof-dir", profileDir, bundle] : [bundle];
    return spawnHost(ROOT, { ...hostEnv(hostId), ...extraEnv }, () => {}, {
      argv,
      readyTimeoutMs: 60_000,
      stopGraceMs: 20_000,
    });
  }

  async function batch(host: HostHandle, kind: "text" | "tool", n: number, idleCpuPerS: number, idleRedisPerS: number) {
    const pid = host.process.pid as number;
    await sleep(300);
    const rss0 = await rssMiB(pid);
    const cpu0 = await cpuMs(pid);
    const redis0 = await redisCommands();
    const pg0 = { ...pgProxy.counts };
    const redisBy0 = new Map(redisByCommand);
    const pgBy0 = new Map(pgProxy.byText);
    const ingest0 = ingest.stats.requests;
    const ids = Array.from({ length: n }, () => randomUUID());
    const content =
      kind === "text"
        ? `!mock ${JSON.stringify({ reply: REPLY })}`
        : `!mock ${JSON.stringify({ reply: REPLY, tool_calls: [{ name: "shell", args: { command: "echo bench" } }] })}`;
    const done = ids.map((id) => ingest.terminal(id));
    const t0 = performance.now();
    await db.insert(schema.jobs).values(
      ids.map((id) => ({
        id,
        tenantId: TENANT,
        tools: kind === "tool" ? ["shell" as const] : [],
        input: { messages: [{ role: "user" as const, content }] },
      })),
    );
    let peak = rss0;
    let sampling = true;
    const sampler = (async () => {
      while (sampling) {
        peak = Math.max(peak, await rssMiB(pid));
        await sleep(100);
      }
    })();
    const ends = await Promise.all(done);
    // The run's tail after its terminal event: the phase-metrics read, the sandbox's removal.
    if (kind === "tool") {
      const filters = JSON.stringify({ label: [`${LABEL_HOST}=${host.id}`] });
      while ((await docker.listContainers({ all: true, filters })).length > 0) await sleep(100);
    }
    await sleep(300);
    sampling = false;
    await sampler;
    const wallMs = performance.now() - t0;
    const cpu = (await cpuMs(pid)) - cpu0;
    const redisCalls = (await redisCommands()) - redis0;
    const perRun = (now: Map<string, number>, then: Map<string, number>) =>
      [...now.entries()]
        .map(([k, v]) => [k, (v - (then.get(k) ?? 0)) / n] as const)
        .filter(([, v]) => v > 0)
        .sort((a, b) => b[1] - a[1])
        .map(([k, v]) => `${v.toFixed(2)} × ${k}`);
    const breakdown = { redis: perRun(redisByCommand, redisBy0), postgres: perRun(pgProxy.byText, pgBy0) };
    const sample: Sample = {
      breakdown,
      cpuPerRunMs: cpu / n,
      cpuPerRunNetMs: (cpu - (idleCpuPerS * wallMs) / 1000) / n,
      rssPerRunMiB: (peak - rss0) / n,
      redisPerRun: (redisCalls - (idleRedisPerS * wallMs) / 1000) / n,
      pgStatementsPerRun: (pgProxy.counts.statements - pg0.statements) / n,
      pgTripsPerRun: (pgProxy.counts.trips - pg0.trips) / n,
      ingestPerRun: (ingest.stats.requests - ingest0) / n,
      latenciesMs: ends.map((e) => e - t0),
      wallMs,
    };
    return sample;
  }

  async function idleRates(host: HostHandle): Promise<{ cpuPerS: number; redisPerS: number; pgPerS: number }> {
    const pid = host.process.pid as number;
    await sleep(2000);
    const [c0, r0, p0, t0] = [await cpuMs(pid), await redisCommands(), pgProxy.counts.statements, performance.now()];
    await sleep(5000);
    const s = (performance.now() - t0) / 1000;
    return {
      cpuPerS: ((await cpuMs(pid)) - c0) / s,
      redisPerS: ((await redisCommands()) - r0) / s,
      pgPerS: (pgProxy.counts.statements - p0) / s,
    };
  }

  const rows: Row[] = [];
  try {
    const host = await startBenchHost();
    const idle = await idleRates(host);
    log(
      `idle host: ${idle.cpuPerS.toFixed(1)} CPU ms/s, ${idle.redisPerS.toFixed(2)} Redis commands/s, ${idle.pgPerS.toFixed(2)} Postgres statements/s`,
    );
    const plan: Array<{ host: HostHandle; kind: "text" | "tool"; label: string; idle: typeof idle }> = [];
    for (const kind of kinds as Array<"text" | "tool">) {
      if (kind === "tool" && !dockerUp) {
        log("no Docker engine: tool runs skipped");
        continue;
      }
      plan.push({ host, kind, label: kind, idle });
    }
    for (const step of plan) {
      const { kind } = step;
      for (const n of sizes(kind === "tool" ? args["tool-runs"] : args.runs)) {
        const samples: Sample[] = [];
        // One warm-up batch (JIT, connection pool growth), not counted.
        await batch(step.host, kind, n, step.idle.cpuPerS, step.idle.redisPerS);
        for (let i = 0; i < repsFor(n); i++) {
          samples.push(await batch(step.host, kind, n, step.idle.cpuPerS, step.idle.redisPerS));
        }
        const pick = (f: (s: Sample) => number) => {
          const xs = samples.map(f);
          return { p50: pct(xs, 50), p95: pct(xs, 95) };
        };
        const row: Row = {
          kind: step.label,
          runs: n,
          reps: samples.length,
          cpuMsPerRun: pick((s) => s.cpuPerRunMs),
          cpuMsPerRunNet: pick((s) => s.cpuPerRunNetMs),
          rssMiBPerRun: pick((s) => s.rssPerRunMiB),
          redisPerRun: pick((s) => s.redisPerRun),
          pgStatementsPerRun: pick((s) => s.pgStatementsPerRun),
          pgTripsPerRun: pick((s) => s.pgTripsPerRun),
          ingestPerRun: pick((s) => s.ingestPerRun),
          latencyMs: (() => {
            const xs = samples.flatMap((s) => s.latenciesMs);
            return { p50: pct(xs, 50), p95: pct(xs, 95) };
          })(),
          load: load(),
        };
        rows.push(row);
        const last = samples.at(-1) as Sample;
        log(`${kind} × ${n}, per run (last batch): Redis ${last.breakdown.redis.join(", ")}`);
        log(`${kind} × ${n}, per run (last batch): Postgres\n    ${last.breakdown.postgres.join("\n    ")}`);
        log(`${kind} × ${n}: ${JSON.stringify(row)}`);
      }
    }
    await host.stop();

    if (args.tracing) {
      const receiver = await spanCounter();
      const traced = await startBenchHost(undefined, {
        OTEL_EXPORTER_OTLP_ENDPOINT: receiver.url,
        OTEL_EXPORTER_OTLP_PROTOCOL: "http/json",
        OTEL_BSP_SCHEDULE_DELAY: "200",
      });
      try {
        const tracedIdle = await idleRates(traced);
        log(`idle traced host: ${tracedIdle.cpuPerS.toFixed(1)} CPU ms/s`);
        for (const n of sizes(args.runs)) {
          const samples: Sample[] = [];
          const spans: number[] = [];
          await batch(traced, "text", n, tracedIdle.cpuPerS, tracedIdle.redisPerS);
          for (let i = 0; i < repsFor(n); i++) {
            await sleep(600);
            const before = receiver.spans;
            samples.push(await batch(traced, "text", n, tracedIdle.cpuPerS, tracedIdle.redisPerS));
            // Two batch delays: every span of the batch has been exported.
            await sleep(600);
            spans.push((receiver.spans - before) / n);
          }
          const pick = (f: (s: Sample) => number) => {
            const xs = samples.map(f);
            return { p50: pct(xs, 50), p95: pct(xs, 95) };
          };
          const row: Row = {
            kind: "text, traced",
            runs: n,
            reps: samples.length,
            cpuMsPerRun: pick((s) => s.cpuPerRunMs),
            cpuMsPerRunNet: pick((s) => s.cpuPerRunNetMs),
            rssMiBPerRun: pick((s) => s.rssPerRunMiB),
            redisPerRun: pick((s) => s.redisPerRun),
            pgStatementsPerRun: pick((s) => s.pgStatementsPerRun),
            pgTripsPerRun: pick((s) => s.pgTripsPerRun),
            ingestPerRun: pick((s) => s.ingestPerRun),
            latencyMs: (() => {
              const xs = samples.flatMap((s) => s.latenciesMs);
              return { p50: pct(xs, 50), p95: pct(xs, 95) };
            })(),
            load: load(),
          };
          rows.push(row);
          log(
            `text, traced × ${n}: spans per run ${spans.map((x) => x.toFixed(2)).join(", ")}; ${JSON.stringify(row)}`,
          );
        }
        log(`OTLP requests received: ${receiver.requests}, spans: ${receiver.spans}`);
      } finally {
        await traced.stop();
        receiver.close();
      }
    }

    if (args["cpu-prof"]) {
      const dir = resolve(args["cpu-prof"]);
      await mkdir(dir, { recursive: true });
      const before = new Set(await readdir(dir));
      const profiled = await startBenchHost(dir);
      await sleep(2000);
      const profRuns = Number(args["prof-runs"]);
      for (let i = 0; i < 3; i++) await batch(profiled, "text", profRuns, 0, 0);
      await profiled.stop();
      const file = (await readdir(dir)).find((f) => f.endsWith(".cpuprofile") && !before.has(f));
      if (file) printProfile(JSON.parse(await readFile(join(dir, file), "utf8")), join(dir, file), profRuns);
      else log(`no profile written in ${dir}`);
    }
    let gateway: RouteCost[] = [];
    if (!args["skip-gateway"]) {
      try {
        gateway = await measureGateway(log);
      } catch (err) {
        log(`gateway measurement failed: ${err instanceof Error ? err.stack : String(err)}`);
      }
    }
    printTable(rows, idle);
    if (gateway.length > 0) {
      bench.say(`\ngateway (workerd process CPU per request; load average now ${load()}):`);
      bench.say("| route | requests | CPU ms/request p50 / p95 (per round of 20) | wall ms p50 / p95 |");
      bench.say("|---|---:|---:|---:|");
      for (const g of gateway) {
        bench.say(
          `| ${g.route} | ${g.requests} | ${g.cpuMs.p50.toFixed(2)} / ${g.cpuMs.p95.toFixed(2)} | ${g.wallMs.p50.toFixed(0)} / ${g.wallMs.p95.toFixed(0)} |`,
        );
      }
    }
    bench.done({ idle, rows, gateway });
  } finally {
    monitor.disconnect();
    direct.disconnect();
    await pool.end();
    pgProxy.close();
    ingest.close();
    await mock.close();
    await bridge.close();
    await redis.stop();
    await pgService.stop();
  }
}

function printTable(rows: Row[], idle: { cpuPerS: number; redisPerS: number; pgPerS: number }) {
  const f = (x: Q, d = 1) => `${x.p50.toFixed(d)} / ${x.p95.toFixed(d)}`;
  bench.say(
    `\nidle host: ${idle.cpuPerS.toFixed(1)} CPU ms/s, ${idle.redisPerS.toFixed(2)} Redis commands/s, ${idle.pgPerS.toFixed(2)} Postgres statements/s`,
  );
  bench.say(
    "| runs | kind | CPU ms/run p50 / p95 | net of idle | RSS MiB/run | Redis cmds/run (net) | PG statements/run | PG round trips/run | ingest req/run | latency ms p50 / p95 | load 1/5/15 |",
  );
  bench.say("|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---|");
  for (const r of rows) {
    bench.say(
      `| ${r.runs} | ${r.kind} | ${f(r.cpuMsPerRun)} | ${f(r.cpuMsPerRunNet)} | ${f(r.rssMiBPerRun, 2)} | ${f(r.redisPerRun)} | ${f(r.pgStatementsPerRun)} | ${f(r.pgTripsPerRun)} | ${f(r.ingestPerRun)} | ${f(r.latencyMs, 0)} | ${r.load} |`,
    );
  }
}

interface CpuProfile {
  nodes: Array<{
    id: number;
    callFrame: { functionName: string; url: string; lineNumber: number };
    hitCount?: number;
    children?: number[];
  }>;
  startTime: number;
  endTime: number;
  samples: number[];
}

/** Self time by function and by package/file: where the host's CPU went. */
function printProfile(p: CpuProfile, file: string, runs: number): void {
  const totalMs = (p.endTime - p.startTime) / 1000;
  const perSample = totalMs / Math.max(1, p.samples.length);
  const byFn = new Map<string, number>();
  const byArea = new Map<string, number>();
  const short = (url: string) => url.replace(/^file:\/\//, "").replace(`${ROOT}/`, "");
  for (const n of p.nodes) {
    const ms = (n.hitCount ?? 0) * perSample;
    if (!ms) continue;
    const { functionName, url, lineNumber } = n.callFrame;
    const key = `${functionName || "(anonymous)"} ${short(url)}:${lineNumber + 1}`;
    byFn.set(key, (byFn.get(key) ?? 0) + ms);
    const u = short(url);
    const area = u.includes("node_modules/")
      ? `npm:${/node_modules\/((?:@[^/]+\/)?[^/]+)/.exec(u)?.[1]}`
      : u.startsWith("node:")
        ? u
        : u === ""
          ? `(${functionName})`
          : u;
    byArea.set(area, (byArea.get(area) ?? 0) + ms);
  }
  const busy = [...byFn.entries()].filter(([k]) => !k.startsWith("(idle)")).reduce((a, [, v]) => a + v, 0);
  const top = (m: Map<string, number>, n: number) =>
    [...m.entries()]
      .filter(([k]) => !k.startsWith("(idle)"))
      .sort((a, b) => b[1] - a[1])
      .slice(0, n)
      .map(([k, v]) => `  ${v.toFixed(0).padStart(6)} ms  ${((100 * v) / busy).toFixed(1).padStart(5)} %  ${k}`)
      .join("\n");
  bench.say(
    `\n--cpu-prof ${file}: ${busy.toFixed(0)} ms busy of ${totalMs.toFixed(0)} ms (3 × ${runs} concurrent text runs, the host's whole life)`,
  );
  bench.say(`by package / file (self time):\n${top(byArea, 15)}`);
  bench.say(`by function (self time):\n${top(byFn, 25)}`);
}

main().catch((err: unknown) => {
  console.error(err);
  process.exit(1);
});
