/**
 * `npm run bench:code-tools`: what running a code tool on a thread costs (docs/tools.md,
 * "Measured"). (1) A trivial tool's call through the host's CodeTools (argument check, run and
 * result on a tool thread, the hops there and back) against the same work in the loop (zod
 * parse, run, JSON), sequential calls, p50/p95. (2) The host thread's event-loop delay
 * (`monitorEventLoopDelay`, 10 ms resolution, and the worst gap of a 20 ms timer) idle, while
 * `--blockers` (8) tools each hold their thread for `--block-ms` (3000), and, for contrast,
 * while one such tool runs on the loop itself for 1 s.
 */
import { resolve } from "node:path";
import { monitorEventLoopDelay } from "node:perf_hooks";
import { CodeTools } from "../../sandbox-host/code-tools/code-tool-pool";
import type { CodeToolIdentity } from "../../sandbox-host/code-tools/tool-call";
import { describeTool, loadToolModules, toolModuleSpecifiers } from "../../sandbox-host/code-tools/tool-modules";
import { createLogger } from "../../sandbox-host/log";
import type { ToolContext } from "../../src/code-tools/define-tool";
import { dist, startBench, summary } from "./harness";

const bench = startBench({
  usage: "npm run bench:code-tools -- [--calls 1000] [--blockers 8] [--block-ms 3000] [--json]",
  options: { calls: { type: "string" }, blockers: { type: "string" }, "block-ms": { type: "string" } },
});
const CALLS = Number(bench.args.calls ?? 1000);
const BLOCKERS = Number(bench.args.blockers ?? 8);
const BLOCK_MS = Number(bench.args["block-ms"] ?? 3000);

const modules = toolModuleSpecifiers([resolve(import.meta.dirname, "../lib/bench-tools-module.ts")], process.cwd());
const loaded = await loadToolModules(modules);
const log = createLogger({ host: "bench" });
const identity: CodeToolIdentity = {
  job_id: "00000000-0000-4000-8000-000000000001",
  execution_id: "00000000-0000-4000-8000-000000000002",
  epoch: 1,
  tenant_id: "bench",
  idempotency_key: "00000000-0000-4000-8000-000000000001:call",
};
const never = new AbortController().signal;

// (1) overhead, one thread, calls one after another.
const one = new CodeTools({
  modules,
  specs: [...loaded.values()].map(describeTool),
  concurrency: 1,
  memoryMb: 256,
  log,
});
for (let i = 0; i < 50; i++) await one.call({ name: "echo", args: { text: `w${i}` }, identity }, never);
const threaded: number[] = [];
for (let i = 0; i < CALLS; i++) {
  const t0 = performance.now();
  const r = await one.call({ name: "echo", args: { text: `t${i}` }, identity }, never);
  threaded.push(performance.now() - t0);
  if (!r.ok) throw new Error(`echo failed: ${r.message}`);
}
await one.close();
const echo = loaded.get("echo")?.tool;
if (!echo) throw new Error("no echo tool");
const ctx: ToolContext = { ...identity, signal: never, log: { info() {}, warn() {}, error() {} } };
const inLoop: number[] = [];
for (let i = 0; i < CALLS + 50; i++) {
  const t0 = performance.now();
  const parsed = (echo.input as { parse(v: unknown): unknown }).parse({ text: `l${i}` });
  JSON.stringify(await echo.run(parsed as never, ctx));
  if (i >= 50) inLoop.push(performance.now() - t0);
}

// (2) the loop's delay: idle, BLOCKERS tools blocking their threads, one tool blocking the loop.
async function loopDelay(work: () => Promise<unknown>) {
  const h = monitorEventLoopDelay({ resolution: 10 });
  let worstGap = 0;
  let last = performance.now();
  const ticker = setInterval(() => {
    const now = performance.now();
    worstGap = Math.max(worstGap, now - last);
    last = now;
  }, 20);
  h.enable();
  await work();
  h.disable();
  clearInterval(ticker);
  const ms = (ns: number) => ns / 1e6;
  return {
    p50_ms: ms(h.percentile(50)),
    p99_ms: ms(h.percentile(99)),
    max_ms: ms(h.max),
    worst_timer_gap_ms: worstGap,
  };
}
const many = new CodeTools({
  modules,
  specs: [...loaded.values()].map(describeTool),
  concurrency: BLOCKERS,
  memoryMb: 256,
  log,
});
// Threads started and their modules loaded first: a thread's start is not what is measured.
await Promise.all(
  Array.from({ length: BLOCKERS }, () => many.call({ name: "spin", args: { ms: 200 }, identity }, never)),
);
const idle = await loopDelay(() => new Promise((r) => setTimeout(r, BLOCK_MS)));
const blocked = await loopDelay(() =>
  Promise.all(
    Array.from({ length: BLOCKERS }, () => many.call({ name: "spin", args: { ms: BLOCK_MS }, identity }, never)),
  ),
);
await many.close();
const spin = loaded.get("spin")?.tool;
if (!spin) throw new Error("no spin tool");
const onLoop = await loopDelay(async () => {
  await new Promise((r) => setTimeout(r, 50));
  spin.run({ ms: 1000 } as never, ctx);
  await new Promise((r) => setTimeout(r, 50));
});

const round = (x: number) => Math.round(x * 1000) / 1000;
bench.say(`code tool call, ${CALLS} sequential calls; ${bench.load()}`);
bench.say(`  on a tool thread: ${summary(threaded, 3)}`);
bench.say(`  in the loop:      ${summary(inLoop, 3)}`);
bench.say(`host thread event-loop delay (${bench.load()}):`);
bench.table([
  ["while", "p50 ms", "p99 ms", "max ms", "worst 20 ms-timer gap ms"],
  ...(
    [
      ["idle", idle],
      [`${BLOCKERS} tools blocking their threads ${BLOCK_MS} ms`, blocked],
      ["1 tool blocking the loop 1000 ms", onLoop],
    ] as const
  ).map(([what, d]) => [what, round(d.p50_ms), round(d.p99_ms), round(d.max_ms), round(d.worst_timer_gap_ms)]),
]);
bench.done({
  calls: CALLS,
  threaded_ms: dist(threaded),
  in_loop_ms: dist(inLoop),
  loop_delay: { idle, blocked: { blockers: BLOCKERS, block_ms: BLOCK_MS, ...blocked }, on_loop: onLoop },
});
