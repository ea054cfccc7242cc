/**
 * `npm run bench:pg-bridge` — the local stand-in for Neon's front door (tools/bridges/pg-proxy)
 * measured the way the gateway uses it: `--concurrency` loops each issuing one query at a time
 * until `--queries` have run, reporting queries/s and per-query median/p95, with the load average.
 *
 * Drivers (`--driver`, comma-separated, default all):
 *   http     `neon()` from @neondatabase/serverless: one POST /sql per query (the gateway's driver)
 *   ws       Neon's `Client` over the WebSocket tunnel, connected, queried once and closed per
 *            query: what a Worker has to do, since a Worker cannot keep a socket across requests
 *   ws-pool  one Neon `Pool` (max = --pool) kept open: what only a long-lived process can do
 * Where the bridge runs (`--bridge`): `child` (own process, as the stack starts it) or `inproc`
 * (inside this process, as the stack started it before: the bridge then shares this loop with
 * the clients, the way it shared `npm run load --self-start`'s loop with the load clients).
 *
 * Self-contained: its own embedded Postgres and bridge. ~10–30 s.
 */
import { Client as NeonClient, Pool as NeonPool, neon, neonConfig } from "@neondatabase/serverless";
import { WebSocket } from "ws";
import { startPgProxy } from "../bridges/pg-proxy/main";
import { startChildService } from "../stack/services/child-service";
import { startPostgres } from "../stack/services/postgres";
import { measureConcurrent, startBench, treeCpuSeconds } from "./harness";

const DRIVERS = ["http", "ws", "ws-pool"] as const;
type Driver = (typeof DRIVERS)[number];

const bench = startBench({
  usage:
    "npm run bench:pg-bridge -- [--driver http,ws,ws-pool] [--bridge child|inproc] [--concurrency 100] [--queries 2000] [--pool 20] [--workers N] [--json]",
  options: {
    driver: { type: "string", default: DRIVERS.join(",") },
    bridge: { type: "string", default: "child" },
    concurrency: { type: "string", default: "100" },
    queries: { type: "string", default: "2000" },
    pool: { type: "string", default: "20" },
    workers: { type: "string" },
  },
});
const drivers = bench.args.driver.split(",").map((d) => d.trim()) as Driver[];
for (const d of drivers) {
  if (!DRIVERS.includes(d)) {
    bench.say(`--driver: unknown driver ${d} (one of ${DRIVERS.join(", ")})`);
    process.exit(2);
  }
}
if (bench.args.bridge !== "child" && bench.args.bridge !== "inproc") {
  bench.say("--bridge must be child or inproc");
  process.exit(2);
}
const concurrency = Number(bench.args.concurrency);
const total = Number(bench.args.queries);
const poolMax = Number(bench.args.pool);

/** One round of the gateway's most common shape: a keyed read with a parameter. */
const SQL = "select $1::int + 1 as n, now() as at";

let bridgePid: number | null = null;
const bridgeCpuS = async () => (bridgePid === null ? null : treeCpuSeconds(bridgePid));

async function measure(
  run: (i: number) => Promise<void>,
): Promise<{ qps: number; p50: number; p95: number; clientCpuMs: number; bridgeCpuMs: number | null }> {
  // Warm-up inside: the bridge's pool, the driver's connections, the JIT. Per query: what the
  // driver costs its caller, and what the bridge costs (child mode only).
  const m = await measureConcurrent(run, { concurrency, total, serverCpuS: bridgeCpuS });
  return { qps: m.perS, p50: m.p50, p95: m.p95, clientCpuMs: m.clientCpuMs, bridgeCpuMs: m.serverCpuMs };
}

const pg = await startPostgres({});
const stops: Array<() => Promise<unknown>> = [() => pg.stop()];
try {
  let proxyUrl: string;
  if (bench.args.bridge === "inproc") {
    const proxy = await startPgProxy({ databaseUrl: pg.url });
    stops.push(() => proxy.close());
    proxyUrl = proxy.url;
  } else {
    const child = await startChildService({
      name: "pg bridge",
      cwd: process.cwd(),
      argv: [
        "--import",
        "tsx",
        "tools/bridges/pg-proxy/main.ts",
        "--database-url",
        pg.url,
        ...(bench.args.workers ? ["--workers", bench.args.workers] : []),
      ],
      ready: (line) => /listening on (\S+)/.exec(line)?.[1] ?? null,
    });
    stops.push(() => child.stop());
    proxyUrl = child.value;
    bridgePid = child.process.pid ?? null;
  }
  const hostPort = proxyUrl.replace(/^http:\/\//, "");
  neonConfig.fetchEndpoint = `${proxyUrl}/sql`;
  neonConfig.wsProxy = (host, port) => `${hostPort}/v2?address=${host}:${port}`;
  neonConfig.useSecureWebSocket = false;
  neonConfig.pipelineTLS = false;
  neonConfig.pipelineConnect = false;
  neonConfig.webSocketConstructor = WebSocket;

  bench.say(
    `pg bridge (${bench.args.bridge}${bench.args.workers ? `, ${bench.args.workers} workers` : ""}): ` +
      `${total} queries, ${concurrency} concurrent — ${bench.load()}`,
  );
  const rows: Array<Array<string | number>> = [
    ["driver", "queries/s", "p50 ms", "p95 ms", "client CPU ms/q", "bridge CPU ms/q", "load average"],
  ];
  const figures: Record<string, unknown> = {};
  for (const driver of drivers) {
    let run: (i: number) => Promise<void>;
    let close = async () => {};
    if (driver === "http") {
      const sql = neon(pg.url);
      run = async (i) => void (await sql.query(SQL, [i]));
    } else if (driver === "ws") {
      run = async (i) => {
        const c = new NeonClient(pg.url);
        await c.connect();
        try {
          await c.query(SQL, [i]);
        } finally {
          await c.end();
        }
      };
    } else {
      const pool = new NeonPool({ connectionString: pg.url, max: poolMax });
      run = async (i) => void (await pool.query(SQL, [i]));
      close = () => pool.end();
    }
    const r = await measure(run);
    await close();
    const load = bench.load().replace("load average ", "");
    const bridgeCpu = r.bridgeCpuMs === null ? "-" : r.bridgeCpuMs.toFixed(2);
    rows.push([driver, r.qps, r.p50.toFixed(1), r.p95.toFixed(1), r.clientCpuMs.toFixed(2), bridgeCpu, load]);
    figures[driver] = {
      queries_per_s: r.qps,
      p50_ms: r.p50,
      p95_ms: r.p95,
      client_cpu_ms_per_query: r.clientCpuMs,
      bridge_cpu_ms_per_query: r.bridgeCpuMs,
    };
  }
  bench.table(rows);
  bench.done({ bridge: bench.args.bridge, concurrency, queries: total, drivers: figures });
} finally {
  for (const stop of stops.reverse()) await stop().catch(() => {});
}
