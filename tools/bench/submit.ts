/**
 * `npm run bench:submit` — a burst of submits on the dev stack: CLIENTS clients send
 * `POST /v1/jobs` at the same instant, each timing its own answer (202); the server's dispatch
 * (job created → started, from the row) is read back once the hosts started every job.
 *
 * The same burst is then sent past the gateway, to tell our code from the local stand-ins:
 *  - `neon stand-in`: `createJob` × CLIENTS from this process through the production Neon driver
 *    (`neon()`, one HTTP request per query) to tools/bridges/pg-proxy/main.ts, as the gateway's queries go;
 *  - `postgres direct`: `createJob` × CLIENTS over node-postgres straight to Postgres (a pool of
 *    the stand-in's size), no HTTP at all.
 *
 *
 * And the same CLIENTS jobs as one `POST /v1/jobs/batch`: `gateway batch` against
 * `gateway` is one round trip and one INSERT against CLIENTS of each. Every configuration also
 * reports its wall time per round (the burst released → its last answer).
 * `--only "gateway batch,gateway"` runs just those, in that order (labels as printed), so two
 * runs in opposite orders can tell a difference from the machine's load drifting.
 *
 * Self-contained: starts its own stack (2 sandbox-hosts × 50 slots, the mock model) and stops it.
 * Each configuration runs ROUNDS times after a warm-up burst; figures are per round and pooled,
 * printed next to the load average (the machine may be shared). `--json` prints JSON (harness.ts).
 *   BENCH_SUBMIT_CLIENTS (100), BENCH_SUBMIT_ROUNDS (5), BENCH_SUBMIT_HOSTS (2),
 *   BENCH_SUBMIT_SLOTS (50)
 */
import { randomUUID } from "node:crypto";
import { drizzle } from "drizzle-orm/node-postgres";
import pg from "pg";
import type { CreateJobBody } from "../../src/contracts/job";
import type { Db } from "../../src/db/client";
import { createJob } from "../../src/db/jobs-repo";
import { createNeonHttpDb } from "../../src/db/neon-http";
import * as schema from "../../src/db/schema";
import { sleep } from "../../src/domain/async";
import { startPgProxy } from "../bridges/pg-proxy/main";
import { type Stack, startStack } from "../stack/start";
import { loadAverage, pct, startBench } from "./harness";

const CONFIGS = ["gateway", "gateway batch", "neon stand-in", "postgres direct"] as const;

const bench = startBench({
  usage: `npm run bench:submit [-- --json] [--only "${CONFIGS.join(",")}"] (sizes: BENCH_SUBMIT_CLIENTS, _ROUNDS, _HOSTS, _SLOTS)`,
  options: { only: { type: "string", default: CONFIGS.join(",") } },
});
const ONLY = bench.args.only.split(",").map((c) => c.trim());
for (const c of ONLY) {
  if (!(CONFIGS as readonly string[]).includes(c)) {
    process.stderr.write(`--only: unknown configuration "${c}"; one of ${CONFIGS.join(", ")}\n`);
    process.exit(2);
  }
}

const CLIENTS = Number(process.env.BENCH_SUBMIT_CLIENTS ?? 100);
const ROUNDS = Number(process.env.BENCH_SUBMIT_ROUNDS ?? 5);
const HOSTS = Number(process.env.BENCH_SUBMIT_HOSTS ?? 2);
const SLOTS = Number(process.env.BENCH_SUBMIT_SLOTS ?? 50);
const BODY: CreateJobBody = { input: { messages: [{ role: "user", content: "bench submit" }] } };

const load = () => loadAverage().join(" ");

interface Round {
  answer_ms: number[];
  dispatch_ms: number[];
  /** The round released → its last answer. */
  wall_ms: number;
  load_before: string;
}

/** One round's submits: each answer's elapsed ms, the job ids, and the round's wall time. */
interface Sent {
  ms: number[];
  ids: string[];
  wall: number;
}

/** CLIENTS requests released at one instant; each resolves with its own elapsed ms and job id. */
function burst(one: () => Promise<string>): () => Promise<Sent> {
  return async () => {
    let go: () => void = () => {};
    const gate = new Promise<void>((r) => (go = r));
    const runs = Array.from({ length: CLIENTS }, async () => {
      await gate;
      const t0 = performance.now();
      const id = await one();
      return { ms: performance.now() - t0, id };
    });
    const t0 = performance.now();
    go();
    const done = await Promise.all(runs);
    return { ms: done.map((d) => d.ms), ids: done.map((d) => d.id), wall: performance.now() - t0 };
  };
}

/** The CLIENTS jobs as one POST /v1/jobs/batch: one answer, whose time is the round's. */
async function viaBatch(stack: Stack): Promise<Sent> {
  const t0 = performance.now();
  const res = await fetch(`${stack.gatewayUrl}/v1/jobs/batch`, {
    method: "POST",
    headers: { authorization: `Bearer ${stack.apiKey}`, "content-type": "application/json" },
    body: JSON.stringify({ jobs: Array.from({ length: CLIENTS }, () => BODY) }),
  });
  const text = await res.text();
  const wall = performance.now() - t0;
  if (res.status !== 202) throw new Error(`POST /v1/jobs/batch answered ${res.status}: ${text}`);
  return { ms: [wall], ids: (JSON.parse(text) as { jobs: Array<{ id: string }> }).jobs.map((j) => j.id), wall };
}

async function viaGateway(stack: Stack): Promise<string> {
  const res = await fetch(`${stack.gatewayUrl}/v1/jobs`, {
    method: "POST",
    headers: { authorization: `Bearer ${stack.apiKey}`, "content-type": "application/json" },
    body: JSON.stringify(BODY),
  });
  const text = await res.text();
  if (res.status !== 202) throw new Error(`POST /v1/jobs answered ${res.status}: ${text}`);
  return (JSON.parse(text) as { job: { id: string } }).job.id;
}

/** Waits until every job of `ids` has started, then returns created → started per job (ms). */
async function dispatchOf(pool: pg.Pool, ids: string[]): Promise<number[]> {
  const deadline = Date.now() + 120_000;
  for (;;) {
    const { rows } = await pool.query<{ ms: number | null }>(
      "SELECT extract(epoch FROM (started_at - created_at)) * 1000 AS ms FROM jobs WHERE id = ANY($1::uuid[])",
      [ids],
    );
    const started = rows.filter((r) => r.ms !== null).map((r) => Number(r.ms));
    if (started.length === ids.length) return started;
    if (Date.now() > deadline) throw new Error(`${ids.length - started.length} of ${ids.length} jobs never started`);
    await sleep(200);
  }
}

/** Waits until no job is queued or running, so the next round starts on an idle fleet. */
async function drained(pool: pg.Pool): Promise<void> {
  const deadline = Date.now() + 180_000;
  for (;;) {
    const { rows } = await pool.query<{ n: string }>(
      "SELECT count(*) AS n FROM jobs WHERE state IN ('queued', 'claimed', 'running')",
    );
    if (Number(rows[0]?.n) === 0) return;
    if (Date.now() > deadline) throw new Error(`${rows[0]?.n} jobs still queued or running after 180 s`);
    await sleep(250);
  }
}

function summary(rounds: Round[]) {
  const answer = rounds.flatMap((r) => r.answer_ms);
  const dispatch = rounds.flatMap((r) => r.dispatch_ms);
  const wall = rounds.map((r) => r.wall_ms);
  const f = (v: number[], p: number) => (v.length ? Math.round(pct(v, p)) : null);
  return {
    answer_p50_ms: f(answer, 50),
    answer_p95_ms: f(answer, 95),
    answer_max_ms: f(answer, 100),
    dispatch_p50_ms: f(dispatch, 50),
    dispatch_p95_ms: f(dispatch, 95),
    wall_p50_ms: f(wall, 50),
    wall_p95_ms: f(wall, 95),
    per_round: rounds.map((r) => ({
      load: r.load_before,
      wall_ms: Math.round(r.wall_ms),
      answer_p50_ms: f(r.answer_ms, 50),
      answer_p95_ms: f(r.answer_ms, 95),
      dispatch_p95_ms: f(r.dispatch_ms, 95),
    })),
  };
}

async function measure(label: string, pool: pg.Pool, send: () => Promise<Sent>) {
  await drained(pool);
  await send(); // warm-up: connections, the isolate's caches, the pools
  await drained(pool);
  const rounds: Round[] = [];
  for (let i = 0; i < ROUNDS; i++) {
    const load_before = load();
    const { ms, ids, wall } = await send();
    rounds.push({ answer_ms: ms, dispatch_ms: await dispatchOf(pool, ids), wall_ms: wall, load_before });
    await drained(pool);
  }
  const s = summary(rounds);
  bench.say(
    `${label.padEnd(16)} wall p50 ${s.wall_p50_ms} ms, p95 ${s.wall_p95_ms} ms; ` +
      `answer p50 ${s.answer_p50_ms} ms, p95 ${s.answer_p95_ms} ms, max ${s.answer_max_ms} ms; ` +
      `dispatch p50 ${s.dispatch_p50_ms} ms, p95 ${s.dispatch_p95_ms} ms ` +
      `(${CLIENTS} at once × ${ROUNDS} rounds; load ${rounds.map((r) => r.load_before.split(" ")[0]).join(", ")})`,
  );
  return { label, ...s };
}

async function main() {
  bench.say(`bench:submit — ${CLIENTS} clients at once, ${HOSTS} hosts × ${SLOTS} slots; load average ${load()}`);
  const stack = await startStack({ hosts: HOSTS, hostEnv: { HOST_MAX_RUNS: String(SLOTS) } });
  const pool = new pg.Pool({ connectionString: stack.databaseUrl, max: 4 });
  // The stand-in's own pool size, so "direct" differs from "stand-in" only by the HTTP hop.
  const directPool = new pg.Pool({ connectionString: stack.databaseUrl, max: 20 });
  const proxy = await startPgProxy({ databaseUrl: stack.databaseUrl });
  try {
    const neonDb = createNeonHttpDb({ connectionString: stack.databaseUrl, fetchEndpoint: `${proxy.url}/sql` });
    const directDb: Db = drizzle(directPool, { schema });
    const created = async (db: Db) => (await createJob(db, stack.tenantId, randomUUID(), BODY)).job.id;
    const sends: Record<(typeof CONFIGS)[number], () => Promise<Sent>> = {
      gateway: burst(() => viaGateway(stack)),
      "gateway batch": () => viaBatch(stack),
      "neon stand-in": burst(() => created(neonDb as unknown as Db)),
      "postgres direct": burst(() => created(directDb)),
    };
    const results = [];
    for (const label of ONLY as Array<(typeof CONFIGS)[number]>) results.push(await measure(label, pool, sends[label]));
    bench.say(`load average at the end ${load()}`);
    bench.done({ clients: CLIENTS, rounds: ROUNDS, hosts: HOSTS, slots: SLOTS, results });
  } finally {
    await proxy.close();
    await directPool.end();
    await pool.end();
    await stack.stop();
  }
}

await main();
