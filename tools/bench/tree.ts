/**
 * `npm run bench:tree [-- --trees N --single N --slots S --e2e R]`: what a sub-agent tree costs
 * and how fast a cancel reaches all of it, on a self-started stack with 3 hosts (the mock model).
 *
 *  1. Cost and end to end. R times (default 5), interleaved so they share the machine's load:
 *     a `boss` root (`delegates: ["worker"]`) whose one turn delegates 10 tasks of 0.3 s of model
 *     output each, submit → root `completed`; the baselines, one job doing one task alone and one
 *     job doing all 10 tasks' output alone (one 3 s answer). For each: the hosts' Postgres
 *     statements and round trips, counted on the wire by a proxy between the 3 hosts and Postgres
 *     (less the idle hosts' own rate over the same window).
 *  2. Tree cancel convergence. N trees (default 20) of 1 root + 10 children whose model never
 *     answers within the bench (ttft 60 s), so every child is running (or queued, when the hosts
 *     have fewer than 10 slots) when the root is cancelled. Before each cancel, what the tree
 *     holds: the waiting root's `owner` / `execution_id` (no slot), `runs_active` and
 *     `quota_leases_held` per host (their /metrics), the model's lease ZSET in Redis. Then the
 *     cancel API call sent → every row of the tree final (one Postgres query every 5 ms, as
 *     bench:cancel polls). Baseline in the same run, interleaved: a single running job (no
 *     children) cancelled the same way. Prints p50 / p95 / max and the ratio tree / single.
 *
 * The load average is printed at the start and the end: on a shared machine the figures are an
 * upper bound.
 */
import { cpus } from "node:os";
import pg from "pg";
import { FINAL_STATES } from "../../src/contracts/job-state";
import { sleep } from "../../src/domain/async";
import { quotaKeys, redisKeys } from "../../src/quota/keys";
import { createRedisClient } from "../../src/quota/redis";
import { countingPgProxy } from "../lib/pg-counting-proxy";
import { startPostgres } from "../stack/services/postgres";
import { startStack } from "../stack/start";
import { dist, summary as fmt, pct, startBench } from "./harness";

const bench = startBench({
  usage: "npm run bench:tree -- [--trees 20] [--single N] [--slots 4] [--e2e 5] [--json]",
  options: {
    trees: { type: "string", default: "20" },
    /** Single-job cancels for the baseline (default: as many as trees). */
    single: { type: "string" },
    /** HOST_MAX_RUNS per host: 4 runs all 10 children at once over the 3 hosts; 1 leaves 7 queued. */
    slots: { type: "string", default: "4" },
    e2e: { type: "string", default: "5" },
  },
});
const args = bench.args;
const HOSTS = 3;
const CHILDREN = 10;
const TREES = Number(args.trees);
const SINGLES = Number(args.single ?? args.trees);
const SLOTS = Number(args.slots);
const E2E = Number(args.e2e);
/** One task: 30 tokens at 100 tokens/s, 0.3 s of model output. */
const TASK = { tokens: 30, tokens_per_s: 100 };

const mock = (s: unknown) => `!mock ${JSON.stringify(s)}`;
const delegateCalls = (agent: string, inputs: string[]) =>
  mock({ tool_calls: inputs.map((input) => ({ name: `delegate_${agent}`, args: { input } })) });
const load = () => `${bench.load()} (1, 5, 15 min; ${cpus().length} cores)`;

async function metric(url: string, name: string): Promise<number> {
  const text = await (await fetch(url)).text();
  const line = text.split("\n").find((l) => l.startsWith(`${name}{`) || l.startsWith(`${name} `));
  return line ? Number(line.slice(line.lastIndexOf(" ") + 1)) : Number.NaN;
}

async function main() {
  bench.say(`start: ${load()}`);
  console.error(`starting a stack with ${HOSTS} hosts × ${SLOTS} slots…`);
  // Postgres is started here so the hosts can reach it through the counting proxy; the gateway
  // and this process connect to it directly and are not counted.
  const pgService = await startPostgres();
  const counter = await countingPgProxy({ host: pgService.host, port: pgService.port });
  const hostDbUrl = new URL(pgService.url);
  hostDbUrl.host = `127.0.0.1:${counter.port}`;
  const stack = await startStack({
    databaseUrl: pgService.url,
    hosts: HOSTS,
    mockModel: { ttftMs: 5, tokensPerS: 2000 },
    hostEnv: { DATABASE_URL: hostDbUrl.toString(), HOST_MAX_RUNS: String(SLOTS) },
  }).catch(async (err) => {
    counter.close();
    await pgService.stop();
    throw err;
  });
  const pool = new pg.Pool({ connectionString: stack.databaseUrl, max: 3 });
  const redis = createRedisClient(stack.upstash);
  const leaseKey = redisKeys().quotaLeases(quotaKeys.model(stack.modelName));
  const headers = { authorization: `Bearer ${stack.apiKey}`, "content-type": "application/json" };
  const post = (path: string, body?: unknown) =>
    fetch(`${stack.gatewayUrl}${path}`, {
      method: "POST",
      headers,
      body: body === undefined ? undefined : JSON.stringify(body),
    });
  const defineAgent = async (name: string, def: Record<string, unknown>) => {
    const r = await post("/v1/agents", { name, model: stack.modelName, ...def });
    if (r.status !== 201) throw new Error(`agent ${name}: HTTP ${r.status} ${await r.text()}`);
  };
  const submit = async (agent: string, content: string) => {
    const r = await post("/v1/jobs", { agent, input: { messages: [{ role: "user", content }] } });
    const body = (await r.json()) as { job?: { id: string } };
    if (!body.job) throw new Error(`submit: HTTP ${r.status} ${JSON.stringify(body)}`);
    return body.job.id;
  };
  /** Rows of the tree (the root and every descendant) not yet final. */
  const openRows = async (root: string) =>
    (
      await pool.query<{ n: number }>(
        "select count(*)::int as n from jobs where (id = $1 or root_job_id = $1) and not (state = any($2))",
        [root, FINAL_STATES],
      )
    ).rows[0]?.n as number;
  const until = async <T>(what: string, probe: () => Promise<T | null>, intervalMs: number, timeoutMs = 60_000) => {
    const deadline = performance.now() + timeoutMs;
    for (;;) {
      const v = await probe();
      if (v !== null) return v;
      if (performance.now() > deadline) throw new Error(`timed out waiting for ${what}`);
      await sleep(intervalMs);
    }
  };
  const states = async (root: string) =>
    (
      await pool.query<{ state: string; n: number }>(
        "select state, count(*)::int as n from jobs where id = $1 or root_job_id = $1 group by state",
        [root],
      )
    ).rows
      .map((r) => `${r.n} ${r.state}`)
      .join(", ");

  try {
    await defineAgent("worker", { description: "Does one task." });
    await defineAgent("boss", { delegates: ["worker"] });

    // 1. Cost and end to end.
    const idleStart = { ...counter.counts, at: performance.now() };
    await sleep(3000);
    const idleRate = {
      statements: (counter.counts.statements - idleStart.statements) / ((performance.now() - idleStart.at) / 1000),
      trips: (counter.counts.trips - idleStart.trips) / ((performance.now() - idleStart.at) / 1000),
    };
    type Kind = "tree" | "one task" | "10 tasks in one job";
    const e2e: Record<Kind, { ms: number[]; statements: number[]; trips: number[] }> = {
      tree: { ms: [], statements: [], trips: [] },
      "one task": { ms: [], statements: [], trips: [] },
      "10 tasks in one job": { ms: [], statements: [], trips: [] },
    };
    const runOnce = async (kind: Kind) => {
      const c0 = { ...counter.counts };
      const t0 = performance.now();
      const id =
        kind === "tree"
          ? await submit(
              "boss",
              delegateCalls(
                "worker",
                Array.from({ length: CHILDREN }, () => mock(TASK)),
              ),
            )
          : await submit("worker", mock(kind === "one task" ? TASK : { ...TASK, tokens: TASK.tokens * CHILDREN }));
      const final = await until(
        `${kind} ${id} to finish`,
        async () => {
          const r = await pool.query<{ state: string }>("select state from jobs where id = $1", [id]);
          const s = r.rows[0]?.state as string;
          return (FINAL_STATES as readonly string[]).includes(s) ? s : null;
        },
        5,
      );
      const ms = performance.now() - t0;
      if (final !== "completed") throw new Error(`${kind} ${id} ended ${final}: ${await states(id)}`);
      if (kind === "tree") {
        const summary = await states(id);
        if (summary !== `${CHILDREN + 1} completed`) throw new Error(`tree ${id}: ${summary}`);
      }
      // The hosts' last writes after the state flips (their bookkeeping) belong to this job.
      await sleep(300);
      const s = (performance.now() - t0) / 1000;
      const m = e2e[kind];
      m.ms.push(ms);
      m.statements.push(counter.counts.statements - c0.statements - idleRate.statements * s);
      m.trips.push(counter.counts.trips - c0.trips - idleRate.trips * s);
    };
    // A warm-up of each, not counted: the first job on a host pays for its connections and caches.
    for (const kind of Object.keys(e2e) as Kind[]) await runOnce(kind);
    for (const m of Object.values(e2e)) for (const xs of Object.values(m)) xs.length = 0;
    for (let i = 0; i < E2E; i++) for (const kind of Object.keys(e2e) as Kind[]) await runOnce(kind);

    // 2. Cancel convergence, tree and single interleaved.
    const never = (i: number) => mock({ reply: `never-${i}`, ttft_ms: 60_000 });
    const expectRunning = Math.min(CHILDREN, HOSTS * SLOTS);
    const tree: number[] = [];
    const treeAnswered: number[] = [];
    const single: number[] = [];
    const singleAnswered: number[] = [];
    const held: Array<{
      parentFree: boolean;
      runsActive: number[];
      leases: number[];
      zset: number;
      perHost: number[];
    }> = [];
    const cancelAndConverge = async (id: string, into: number[], answeredInto: number[]) => {
      const t0 = performance.now();
      const r = await post(`/v1/jobs/${id}/cancel`);
      answeredInto.push(performance.now() - t0);
      if (r.status !== 202) throw new Error(`cancel ${id}: HTTP ${r.status} ${await r.text()}`);
      await until(`${id}'s rows final`, async () => ((await openRows(id)) === 0 ? true : null), 5, 30_000);
      into.push(performance.now() - t0);
      const summary = await states(id);
      if (!/^\d+ cancelled$/.test(summary)) throw new Error(`after the cancel of ${id}: ${summary}`);
    };
    for (let i = 0; i < Math.max(TREES, SINGLES); i++) {
      if (i < TREES) {
        const id = await submit(
          "boss",
          delegateCalls(
            "worker",
            Array.from({ length: CHILDREN }, (_, k) => never(k)),
          ),
        );
        await until(
          `tree ${id}: root waiting and ${expectRunning} children running`,
          async () => {
            const r = await pool.query<{ root: string; running: number }>(
              `select (select state from jobs where id = $1) as root,
                      (select count(*)::int from jobs where parent_job_id = $1 and state = 'running' and owner is not null) as running`,
              [id],
            );
            const row = r.rows[0];
            return row?.root === "waiting" && row.running === expectRunning ? true : null;
          },
          20,
        );
        // A run is `running` in Postgres before its model call takes a lease (a Redis round trip
        // later): give the leases up to 5 s to appear, so the gauges below are read in steady state.
        await until(
          "the running children's leases",
          async () => ((await redis.zcard(leaseKey)) >= expectRunning ? true : null),
          20,
          5000,
        ).catch(() => {});
        // What the tree holds now, read from the hosts and Redis, not inferred.
        const parent = (
          await pool.query<{ owner: string | null; execution_id: string | null }>(
            "select owner, execution_id from jobs where id = $1",
            [id],
          )
        ).rows[0];
        const owners = (
          await pool.query<{ owner: string; n: number }>(
            "select owner, count(*)::int as n from jobs where parent_job_id = $1 and state = 'running' group by owner",
            [id],
          )
        ).rows;
        held.push({
          parentFree: parent?.owner === null && parent?.execution_id === null,
          runsActive: await Promise.all(stack.hosts.map((h) => metric(h.metricsUrl, "runs_active"))),
          leases: await Promise.all(stack.hosts.map((h) => metric(h.metricsUrl, "quota_leases_held"))),
          zset: await redis.zcard(leaseKey),
          perHost: stack.hosts.map((h) => owners.find((o) => o.owner === h.id)?.n ?? 0),
        });
        await cancelAndConverge(id, tree, treeAnswered);
      }
      if (i < SINGLES) {
        const id = await submit("worker", never(-1));
        await until(
          `job ${id} running`,
          async () => {
            const r = await pool.query("select 1 from jobs where id = $1 and state = 'running' and owner is not null", [
              id,
            ]);
            return r.rowCount ? true : null;
          },
          20,
        );
        await cancelAndConverge(id, single, singleAnswered);
      }
    }

    // Report.
    const med = (xs: number[]) => pct(xs, 50);
    bench.say(`\nend to end (${E2E} each, interleaved; hosts: ${HOSTS} × HOST_MAX_RUNS=${SLOTS})`);
    bench.say(`  task: ${TASK.tokens} tokens at ${TASK.tokens_per_s} tokens/s from the mock model`);
    const label: Record<Kind, string> = {
      tree: `tree: boss + ${CHILDREN} worker children, one task each`,
      "one task": "baseline: one job, one task",
      "10 tasks in one job": `baseline: one job, ${CHILDREN} tasks' output in one answer`,
    };
    for (const kind of Object.keys(e2e) as Kind[]) {
      const m = e2e[kind];
      bench.say(
        `  ${label[kind].padEnd(52)} submit → completed ${fmt(m.ms)}; hosts' Postgres: ${med(m.statements).toFixed(0)} statements, ${med(m.trips).toFixed(0)} round trips (median, net of idle)`,
      );
    }
    const tr = e2e.tree;
    const one = e2e["one task"];
    const ten = e2e["10 tasks in one job"];
    bench.say(
      `  ratios (medians): tree / one task ${(med(tr.ms) / med(one.ms)).toFixed(2)}x time, ${(med(tr.statements) / med(one.statements)).toFixed(1)}x statements, ${(med(tr.trips) / med(one.trips)).toFixed(1)}x round trips; tree / ${CHILDREN} tasks in one job ${(med(tr.ms) / med(ten.ms)).toFixed(2)}x time`,
    );
    bench.say(
      `  idle hosts (all ${HOSTS}, measured over 3 s first): ${idleRate.statements.toFixed(1)} statements/s, ${idleRate.trips.toFixed(1)} round trips/s`,
    );

    const first = held[0];
    if (first) {
      const sum = (xs: number[]) => xs.reduce((a, b) => a + b, 0);
      const slotsOk = held.filter((h) => sum(h.runsActive) === expectRunning).length;
      const leasesOk = held.filter((h) => sum(h.leases) === expectRunning && h.zset === expectRunning).length;
      bench.say(
        `\nwhat a ${CHILDREN}-child tree holds while it runs (${expectRunning} children running, ${CHILDREN - expectRunning} queued; read before each cancel)`,
      );
      bench.say(
        `  first tree: children per host ${first.perHost.join(", ")}; runs_active per host ${first.runsActive.join(", ")}; quota_leases_held per host ${first.leases.join(", ")}; model lease ZSET ${first.zset}`,
      );
      bench.say(
        `  waiting root with owner and execution_id null (no slot): ${held.filter((h) => h.parentFree).length} of ${held.length} trees`,
      );
      bench.say(
        `  runs_active summed over the hosts = running children (none for the root): ${slotsOk} of ${held.length} trees`,
      );
      bench.say(
        `  quota leases (host gauges and Redis ZSET) = running children (none for the root): ${leasesOk} of ${held.length} trees`,
      );
    }

    bench.say(`\ncancel convergence, API call sent → every row final (polled every 5 ms)`);
    bench.say(`  tree (1 + ${CHILDREN} children over ${HOSTS} hosts, ${TREES} trees): ${fmt(tree)}`);
    bench.say(`  baseline: one running job (${SINGLES} jobs):            ${fmt(single)}`);
    bench.say(
      `  ratio tree / single: p50 ${(pct(tree, 50) / pct(single, 50)).toFixed(2)}x, p95 ${(pct(tree, 95) / pct(single, 95)).toFixed(2)}x`,
    );
    bench.say(`  API call → answered: tree ${fmt(treeAnswered)}; single ${fmt(singleAnswered)}`);
    bench.say(`\nend: ${load()}`);
    bench.done({
      trees: TREES,
      hosts: HOSTS,
      slots: SLOTS,
      end_to_end: Object.fromEntries(
        Object.entries(e2e).map(([kind, m]) => [
          kind,
          { ms: dist(m.ms), statements_median: med(m.statements), round_trips_median: med(m.trips) },
        ]),
      ),
      idle_hosts: idleRate,
      cancel_ms: { tree: dist(tree), single: dist(single) },
      cancel_answered_ms: { tree: dist(treeAnswered), single: dist(singleAnswered) },
    });
  } finally {
    await pool.end();
    await stack.stop();
    counter.close();
    await pgService.stop();
  }
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
