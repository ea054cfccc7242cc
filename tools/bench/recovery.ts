/**
 * `npm run bench:recovery [-- --kills 8 --handoffs 8 --jobs 12 --steps 4]`: what surviving a host
 * costs, on a self-started stack (gateway, Postgres, Redis, the mock model, a recording MCP
 * server) with bundled hosts (heartbeat 1 s, lost after 4 s, reaper every 200 ms):
 *
 *  1. Recovery latency: a job streaming a long answer, its host SIGKILLed → the `run.recovered`
 *     of the new execution on the job's stream (SSE, as a client sees it). Dominated by the lost
 *     bound (4 s here, `HOST_RUN_LOST_AFTER_MS`); printed with the time beyond it.
 *  2. Hand-off latency: the same job, its host SIGTERMed with a 500 ms grace (a deploy) →
 *     `run.recovered` `host_shutdown` on the stream: no lost bound to wait for.
 *  3. The journal's cost per step: batches of jobs whose turn makes `--steps` idempotent MCP
 *     calls, against batches of plain answers (no tool), interleaved in the same run: the hosts'
 *     Postgres statements per job (counted on the wire by a proxy between hosts and Postgres) and
 *     the WAL bytes per job (pg_current_wal_lsn before and after the batch, less the idle hosts'
 *     own rate over the same time); the difference divided by the steps the tool jobs add (one
 *     tool result each, plus the turn that asked for them).
 *
 * The load average is printed at the start and the end: on a shared machine the latencies are
 * upper bounds.
 */
import { cpus } from "node:os";
import pg from "pg";
import { FINAL_STATES } from "../../src/contracts/job-state";
import { sleep } from "../../src/domain/async";
import { bundleHost, signalHost, spawnBundledHost } from "../chaos/bundled-host";
import { readJobStream } from "../chaos/job-stream";
import { startRecordingMcp } from "../chaos/recording-mcp";
import { countingPgProxy } from "../lib/pg-counting-proxy";
import { startPostgres } from "../stack/services/postgres";
import { type HostHandle, startStack } from "../stack/start";
import { summary as fmt, pct, startBench } from "./harness";

const bench = startBench({
  usage: "npm run bench:recovery -- [--kills 8] [--handoffs 8] [--jobs 12] [--steps 4] [--json]",
  options: {
    kills: { type: "string", default: "8" },
    handoffs: { type: "string", default: "8" },
    /** Jobs per journal-cost batch (each kind runs 3 batches, interleaved). */
    jobs: { type: "string", default: "12" },
    steps: { type: "string", default: "4" },
  },
});
const KILLS = Number(bench.args.kills);
const HANDOFFS = Number(bench.args.handoffs);
const JOBS = Number(bench.args.jobs);
const STEPS = Number(bench.args.steps);
const HOST_ENV = {
  HOST_HEARTBEAT_MS: "1000",
  HOST_RUN_LOST_AFTER_MS: "4000",
  HOST_REAP_MS: "200",
  HOST_SHUTDOWN_GRACE_MS: "500",
  SANDBOX_ENABLED: "false",
};
const LOST_MS = Number(HOST_ENV.HOST_RUN_LOST_AFTER_MS);
const mock = (s: unknown) => `!mock ${JSON.stringify(s)}`;
/** 200 words at 20 tokens/s: ~10 s of answer, so the host dies mid-stream. */
const LONG = mock({ reply: Array.from({ length: 200 }, (_, i) => `w${i}`).join(" "), tokens_per_s: 20 });
const load = () => `${bench.load()} (1, 5, 15 min; ${cpus().length} cores)`;

async function main() {
  bench.say(`start: ${load()}`);
  const mcp = await startRecordingMcp(() => 0);
  const pgService = await startPostgres();
  const counter = await countingPgProxy({ host: pgService.host, port: pgService.port });
  const hostDbUrl = new URL(pgService.url);
  hostDbUrl.host = `127.0.0.1:${counter.port}`;
  const stack = await startStack({
    databaseUrl: pgService.url,
    hosts: 0,
    mockModel: { ttftMs: 5, tokensPerS: 2000 },
    gatewayVars: { MCP_ALLOWED_URLS: mcp.url },
    hostEnv: { MCP_ALLOWED_URLS: mcp.url },
  });
  const pool = new pg.Pool({ connectionString: stack.databaseUrl, max: 3 });
  const hosts: HostHandle[] = [];
  const bundle = await bundleHost(process.cwd());
  const spawn = async () => {
    const h = await spawnBundledHost(
      bundle,
      stack.hostEnv({ ...HOST_ENV, DATABASE_URL: hostDbUrl.toString() }),
      () => {},
    );
    hosts.push(h);
    return h;
  };
  const post = async (path: string, body: unknown) => {
    const r = await fetch(`${stack.gatewayUrl}${path}`, {
      method: "POST",
      headers: { authorization: `Bearer ${stack.apiKey}`, "content-type": "application/json" },
      body: JSON.stringify(body),
    });
    return { status: r.status, body: (await r.json()) as Record<string, unknown> };
  };
  const submit = async (body: Record<string, unknown>) => {
    const r = await post("/v1/jobs", body);
    const job = r.body.job as { id: string } | undefined;
    if (!job) throw new Error(`submit: HTTP ${r.status} ${JSON.stringify(r.body)}`);
    return job.id;
  };
  const untilFinal = async (ids: string[], timeoutMs = 120_000): Promise<void> => {
    const deadline = Date.now() + timeoutMs;
    while (Date.now() < deadline) {
      const r = await pool.query<{ n: number }>(
        "select count(*)::int as n from jobs where id = any($1::uuid[]) and not (state = any($2))",
        [ids, FINAL_STATES],
      );
      if (r.rows[0]?.n === 0) return;
      await sleep(50);
    }
    throw new Error("jobs did not finish");
  };

  try {
    await spawn();
    await spawn();
    const r = await post("/v1/agents", {
      name: "steps",
      model: stack.modelName,
      mcp_servers: [{ name: "rec", url: mcp.url, tools: [{ name: "lookup", idempotent: true }] }],
    });
    if (r.status !== 201) throw new Error(`agent: HTTP ${r.status} ${JSON.stringify(r.body)}`);

    // 1 and 2: kill or drain the owner of a streaming job, time until the stream shows run.recovered.
    const alive = () => hosts.filter((h) => h.process.exitCode === null && h.process.signalCode === null);
    const latency = async (signal: "SIGKILL" | "SIGTERM") => {
      while (alive().length < 2) await spawn();
      const id = await submit({ input: { messages: [{ role: "user", content: LONG }] } });
      // The whole stream, read as a client would, to the terminal event.
      const reading = readJobStream(stack, id, 90_000);
      let owner: string | null = null;
      for (const until = Date.now() + 30_000; Date.now() < until && !owner; await sleep(20)) {
        const row = (
          await pool.query<{ owner: string | null; first: Date | null }>(
            "select owner, first_output_at as first from jobs where id = $1 and state = 'running'",
            [id],
          )
        ).rows[0];
        if (row?.owner && row.first) owner = row.owner;
      }
      await sleep(1000); // well into the answer (first_output_at lands with a heartbeat)
      const victim = hosts.find((h) => h.id === owner);
      if (!victim) throw new Error(`job ${id}: no running owner with output`);
      const t0 = Date.now();
      signalHost(victim, signal);
      const { events } = await reading;
      const rec = events.find((e) => e.type === "run.recovered");
      // When the new execution started (its first event is run.recovered), on Postgres' clock.
      const next = (
        await pool.query<{ t: Date | null }>(
          "select min(started_at) as t from executions where job_id = $1 and host <> $2",
          [id, victim.id],
        )
      ).rows[0]?.t;
      const state = (await pool.query<{ state: string }>("select state from jobs where id = $1", [id])).rows[0]?.state;
      signalHost(victim, "SIGKILL");
      return {
        ms: next ? next.getTime() - t0 : Number.NaN,
        outcome: `${signal} → ${rec ? String(rec.payload.reason) : "no run.recovered"}, ${state}`,
      };
    };
    const kills: number[] = [];
    const handoffs: number[] = [];
    const outcomes: string[] = [];
    for (let i = 0; i < Math.max(KILLS, HANDOFFS); i++) {
      if (i < KILLS) {
        const k = await latency("SIGKILL");
        kills.push(k.ms);
        outcomes.push(k.outcome);
      }
      if (i < HANDOFFS) {
        const h = await latency("SIGTERM");
        handoffs.push(h.ms);
        outcomes.push(h.outcome);
      }
    }
    const tally = new Map<string, number>();
    for (const o of outcomes) tally.set(o, (tally.get(o) ?? 0) + 1);
    bench.say(`\nrecovery (SIGKILL → the new execution started), lost bound ${LOST_MS} ms: ${fmt(kills)}`);
    bench.say(`  beyond the lost bound: p50 ${pct(kills, 50) - LOST_MS} ms, p95 ${pct(kills, 95) - LOST_MS} ms`);
    bench.say(`hand-off (SIGTERM, 500 ms grace → the new execution started): ${fmt(handoffs)}`);
    bench.say(`outcomes: ${[...tally].map(([k, n]) => `${n}× ${k}`).join("; ")}`);

    // 3: the journal's cost per step.
    while (alive().length < 2) await spawn();
    const wal = async () =>
      (await pool.query<{ lsn: string }>("select pg_current_wal_lsn()::text as lsn")).rows[0]?.lsn as string;
    const walDiff = async (from: string) =>
      Number(
        (await pool.query<{ d: string }>("select pg_wal_lsn_diff(pg_current_wal_lsn(), $1) as d", [from])).rows[0]?.d,
      );
    const idle0 = { at: performance.now(), st: counter.counts.statements, lsn: await wal() };
    await sleep(3000);
    const idleSecs = (performance.now() - idle0.at) / 1000;
    const idle = { st: (counter.counts.statements - idle0.st) / idleSecs, wal: (await walDiff(idle0.lsn)) / idleSecs };
    const toolJob = (i: number) => ({
      agent: "steps",
      input: {
        messages: [
          {
            role: "user",
            content: mock({
              tool_calls: Array.from({ length: STEPS }, (_, k) => ({ name: "rec__lookup", args: { q: `o${i}.${k}` } })),
              reply: "done",
            }),
          },
        ],
      },
    });
    const plainJob = () => ({ input: { messages: [{ role: "user", content: mock({ reply: "done" }) }] } });
    const batch = async (kind: "plain" | "tools") => {
      const at = performance.now();
      const st0 = counter.counts.statements;
      const lsn = await wal();
      const ids = await Promise.all(
        Array.from({ length: JOBS }, (_, i) => submit(kind === "tools" ? toolJob(i) : plainJob())),
      );
      await untilFinal(ids);
      const secs = (performance.now() - at) / 1000;
      return {
        statements: (counter.counts.statements - st0 - idle.st * secs) / JOBS,
        wal: ((await walDiff(lsn)) - idle.wal * secs) / JOBS,
      };
    };
    const per: Record<"plain" | "tools", Array<{ statements: number; wal: number }>> = { plain: [], tools: [] };
    for (let i = 0; i < 3; i++) {
      per.plain.push(await batch("plain"));
      per.tools.push(await batch("tools"));
    }
    const med = (xs: number[]) => pct(xs, 50);
    const plain = { st: med(per.plain.map((b) => b.statements)), wal: med(per.plain.map((b) => b.wal)) };
    const tools = { st: med(per.tools.map((b) => b.statements)), wal: med(per.tools.map((b) => b.wal)) };
    const extraSteps = STEPS + 1;
    bench.table([
      ["per job (median of 3 batches)", "host statements", "WAL bytes"],
      ["plain answer (1 turn)", plain.st.toFixed(1), plain.wal.toFixed(0)],
      [`${STEPS} tool calls (2 turns)`, tools.st.toFixed(1), tools.wal.toFixed(0)],
      [
        `per added step (${extraSteps})`,
        ((tools.st - plain.st) / extraSteps).toFixed(2),
        ((tools.wal - plain.wal) / extraSteps).toFixed(0),
      ],
    ]);
    bench.say(`idle hosts: ${idle.st.toFixed(1)} statements/s, ${idle.wal.toFixed(0)} WAL bytes/s (subtracted)`);
    bench.say(`end: ${load()}`);
    bench.done({
      lost_bound_ms: LOST_MS,
      recovery_ms: { p50: pct(kills, 50), p95: pct(kills, 95), n: kills.length },
      handoff_ms: { p50: pct(handoffs, 50), p95: pct(handoffs, 95), n: handoffs.length },
      outcomes: Object.fromEntries(tally),
      per_job: { plain, tools },
      per_step: { statements: (tools.st - plain.st) / extraSteps, wal_bytes: (tools.wal - plain.wal) / extraSteps },
    });
  } finally {
    for (const h of hosts) signalHost(h, "SIGKILL");
    await pool.end().catch(() => {});
    await stack.stop().catch(() => {});
    counter.close();
    await pgService.stop().catch(() => {});
    await mcp.close();
  }
}

await main();
