/**
 * `npm run bench:code-tools-host`: a whole host's event loop while code tools block their
 * threads (docs/tools.md, "Measured"). A local stack (tools/stack/start.ts) with one host
 * loading tools/lib/bench-tools-module.ts (HOST_TOOLS, HOST_TOOLS_CONCURRENCY = --blockers),
 * then two windows of the same length: idle, and `--blockers` (8) jobs whose tool holds its
 * thread for `--block-ms` (3000). Per window: the host's own `event_loop_lag_seconds` (a 100 ms
 * timer, metrics/metrics.ts; mean, the bucket holding the worst sample) and `/healthz` answer
 * times probed every 100 ms.
 */
import { startStack } from "../stack/start";
import { startBench, summary } from "./harness";

const bench = startBench({
  usage: "npm run bench:code-tools-host -- [--blockers 8] [--block-ms 3000] [--json]",
  options: { blockers: { type: "string" }, "block-ms": { type: "string" } },
});
const BLOCKERS = Number(bench.args.blockers ?? 8);
const BLOCK_MS = Number(bench.args["block-ms"] ?? 3000);

const stack = await startStack({
  hosts: 1,
  mockModel: { ttftMs: 5, tokensPerS: 2000 },
  hostEnv: {
    HOST_TOOLS: "tools/lib/bench-tools-module.ts",
    HOST_TOOLS_CONCURRENCY: String(BLOCKERS),
    HOST_MAX_RUNS: String(BLOCKERS + 2),
  },
});
try {
  const host = stack.hosts[0];
  if (!host) throw new Error("no host");
  const auth = { authorization: `Bearer ${stack.apiKey}`, "content-type": "application/json" };
  const api = async (method: string, path: string, body?: unknown) => {
    const r = await fetch(`${stack.gatewayUrl}${path}`, {
      method,
      headers: auth,
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    return { status: r.status, body: (await r.json()) as Record<string, unknown> };
  };
  const made = await api("POST", "/v1/agents", { name: "blocker", model: stack.modelName, tools: ["spin"] });
  if (made.status !== 201) throw new Error(`agent: ${JSON.stringify(made.body)}`);

  async function lagSnapshot() {
    const text = await (await fetch(host?.metricsUrl as string)).text();
    const buckets = new Map<string, number>();
    let sum = 0;
    let count = 0;
    for (const line of text.split("\n")) {
      const value = Number(line.split(" ").pop());
      if (line.startsWith("event_loop_lag_seconds_bucket{")) buckets.set(/le="([^"]+)"/.exec(line)?.[1] ?? "", value);
      else if (line.startsWith("event_loop_lag_seconds_sum{")) sum = value;
      else if (line.startsWith("event_loop_lag_seconds_count{")) count = value;
    }
    return { buckets, sum, count };
  }
  async function window(work: () => Promise<unknown>) {
    const before = await lagSnapshot();
    const healthz: number[] = [];
    let done = false;
    const probing = (async () => {
      while (!done) {
        const t0 = performance.now();
        await fetch(new URL("/healthz", host?.metricsUrl)).then((r) => r.text());
        healthz.push(performance.now() - t0);
        await new Promise((r) => setTimeout(r, 100));
      }
    })();
    await work();
    done = true;
    await probing;
    const after = await lagSnapshot();
    const samples = after.count - before.count;
    const bounds = [...after.buckets.keys()].filter((le) => le !== "+Inf").sort((a, b) => Number(a) - Number(b));
    const above = (le: string) => samples - ((after.buckets.get(le) ?? 0) - (before.buckets.get(le) ?? 0));
    return {
      lag_samples: samples,
      lag_mean_ms: samples > 0 ? ((after.sum - before.sum) / samples) * 1000 : 0,
      lag_worst_at_most_ms: Number(bounds.find((le) => above(le) === 0) ?? Number.POSITIVE_INFINITY) * 1000,
      healthz_ms: healthz,
    };
  }
  const script = JSON.stringify({ tool_calls: [{ name: "spin", args: { ms: BLOCK_MS } }], reply: "spun" });
  // One job first: the tool threads start and load the module outside the measured window.
  const runJobs = async (n: number) => {
    const ids: string[] = [];
    for (let i = 0; i < n; i++) {
      const r = await api("POST", "/v1/jobs", {
        agent: "blocker",
        input: { messages: [{ role: "user", content: `!mock ${script.replace(String(BLOCK_MS), "200")}` }] },
      });
      ids.push((r.body.job as { id: string }).id);
    }
    return ids;
  };
  const waitDone = async (ids: string[]) => {
    for (const id of ids) {
      for (;;) {
        const j = (await api("GET", `/v1/jobs/${id}`)).body.job as { state: string };
        if (!["queued", "running"].includes(j.state)) {
          if (j.state !== "completed") throw new Error(`job ${id} ended ${j.state}`);
          break;
        }
        await new Promise((r) => setTimeout(r, 100));
      }
    }
  };
  await waitDone(await runJobs(BLOCKERS));
  const idle = await window(() => new Promise((r) => setTimeout(r, BLOCK_MS + 1000)));
  const blocked = await window(async () => {
    const ids: string[] = [];
    for (let i = 0; i < BLOCKERS; i++) {
      const r = await api("POST", "/v1/jobs", {
        agent: "blocker",
        input: { messages: [{ role: "user", content: `!mock ${script}` }] },
      });
      ids.push((r.body.job as { id: string }).id);
    }
    await waitDone(ids);
  });
  const line = (what: string, w: typeof idle) =>
    bench.say(
      `  ${what}: event_loop_lag mean ${w.lag_mean_ms.toFixed(1)} ms, worst ≤ ${w.lag_worst_at_most_ms} ms (${w.lag_samples} samples); /healthz ${summary(w.healthz_ms)}`,
    );
  bench.say(`one host, HOST_TOOLS_CONCURRENCY=${BLOCKERS}; ${bench.load()}`);
  line("idle", idle);
  line(`${BLOCKERS} tools blocking their threads ${BLOCK_MS} ms`, blocked);
  bench.done({ blockers: BLOCKERS, block_ms: BLOCK_MS, idle, blocked });
} finally {
  await stack.stop();
}
