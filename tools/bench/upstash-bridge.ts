/**
 * `npm run bench:upstash-bridge` — the local Upstash REST bridge (tools/bridges/upstash-rest)
 * measured the way the gateway and the hosts use it: `--concurrency` loops of @upstash/redis
 * (`src/quota/redis.ts`, without auto-pipelining, as the gateway runs it) each sending one request
 * at a time until `--requests` have run, reporting requests/s, median/p95, and the CPU per request
 * of the client and of the bridge process, with the load average.
 *
 * Shapes (`--shape`, comma-separated, default all): `command` (one INCR per request), `pipeline`
 * (5 commands per `/pipeline` request), `eval` (a short Lua script, the quota scripts' shape).
 * Self-contained: its own redis-server and the bridge as its own process. ~10–30 s.
 */
import { createRedisClient } from "../../src/quota/redis";
import { startChildService } from "../stack/services/child-service";
import { startRedis } from "../stack/services/redis";
import { measureConcurrent, startBench, treeCpuSeconds } from "./harness";

const SHAPES = ["command", "pipeline", "eval"] as const;
type Shape = (typeof SHAPES)[number];

const bench = startBench({
  usage:
    "npm run bench:upstash-bridge -- [--shape command,pipeline,eval] [--concurrency 100] [--requests 3000] [--workers 1] [--json]",
  options: {
    shape: { type: "string", default: SHAPES.join(",") },
    concurrency: { type: "string", default: "100" },
    requests: { type: "string", default: "3000" },
    workers: { type: "string", default: "1" },
  },
});
const shapes = bench.args.shape.split(",").map((s) => s.trim()) as Shape[];
for (const s of shapes) {
  if (!SHAPES.includes(s)) {
    bench.say(`--shape: unknown shape ${s} (one of ${SHAPES.join(", ")})`);
    process.exit(2);
  }
}
const concurrency = Number(bench.args.concurrency);
const total = Number(bench.args.requests);
const SCRIPT = "local n = redis.call('INCR', KEYS[1]) redis.call('EXPIRE', KEYS[1], 60) return n";

const redis = await startRedis();
const stops: Array<() => Promise<unknown>> = [() => redis.stop()];
try {
  const token = "bench-token";
  const bridge = await startChildService({
    name: "upstash bridge",
    cwd: process.cwd(),
    argv: [
      "--import",
      "tsx",
      "tools/bridges/upstash-rest/main.ts",
      "--redis-url",
      redis.url,
      "--port",
      "0",
      "--workers",
      bench.args.workers,
    ],
    env: { UPSTASH_BRIDGE_TOKEN: token },
    ready: (line) => /listening on (\S+)/.exec(line)?.[1] ?? null,
  });
  stops.push(() => bridge.stop());
  const client = createRedisClient({ url: bridge.value, token, autoPipelining: false });
  const run: Record<Shape, (i: number) => Promise<unknown>> = {
    command: (i) => client.incr(`bench:c:${i % 100}`),
    pipeline: (i) => {
      const p = client.pipeline();
      for (let k = 0; k < 5; k++) p.incr(`bench:p:${(i + k) % 100}`);
      return p.exec();
    },
    eval: (i) => client.eval(SCRIPT, [`bench:e:${i % 100}`], []),
  };

  bench.say(
    `upstash bridge (own process, ${bench.args.workers} worker(s)): ${total} requests, ${concurrency} concurrent — ${bench.load()}`,
  );
  const rows: Array<Array<string | number>> = [
    ["shape", "requests/s", "p50 ms", "p95 ms", "client CPU ms/req", "bridge CPU ms/req", "load average"],
  ];
  const figures: Record<string, unknown> = {};
  for (const shape of shapes) {
    const one = run[shape];
    const m = await measureConcurrent(one, {
      concurrency,
      total,
      serverCpuS: () => treeCpuSeconds(bridge.process.pid as number),
    });
    const clientMs = m.clientCpuMs;
    const bridgeMs = m.serverCpuMs;
    const r = { rps: m.perS, p50: m.p50, p95: m.p95 };
    rows.push([
      shape,
      r.rps,
      r.p50.toFixed(1),
      r.p95.toFixed(1),
      clientMs.toFixed(2),
      bridgeMs === null ? "-" : bridgeMs.toFixed(2),
      bench.load().replace("load average ", ""),
    ]);
    figures[shape] = {
      requests_per_s: r.rps,
      p50_ms: r.p50,
      p95_ms: r.p95,
      client_cpu_ms_per_request: clientMs,
      bridge_cpu_ms_per_request: bridgeMs,
    };
  }
  bench.table(rows);
  bench.done({ concurrency, requests: total, shapes: figures });
} finally {
  for (const stop of stops.reverse()) await stop().catch(() => {});
}
