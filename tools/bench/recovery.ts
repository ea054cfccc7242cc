/**
 * `npm run bench:recovery -- [--kills 10] [--steps 40] [--suspend-steps 5,20,40] [--suspends 7] [--json]`:
 * what the job journal costs and how fast a run continues elsewhere (docs/capacity.md
 * "Recovery").
 *
 *  1. Journal cost, against the stack's Postgres: one started job appends `--steps` tool steps
 *     the way a run does (the turn riding on the call's row, then the result: 2 statements per
 *     step, a 1 KiB incompressible result each), and the WAL each step writes is read from
 *     `pg_current_wal_lsn()` before and after. The same steps are then written as a rewrite of
 *     the whole transcript per step (`UPDATE jobs SET checkpoint = <all so far>`, what a
 *     checkpoint-per-step design would do): its WAL grows with the square of the steps.
 *  1b. Suspend cost, same Postgres: a started job journals N tool steps (as in 1, not measured),
 *     then suspends at a gated call through the real `suspendJob` statement; the WAL of that
 *     statement and the stored checkpoint's size (`pg_column_size`) are measured for the
 *     checkpoint this host writes (a journal view: the call and its turn) against the one hosts
 *     wrote before (version 1: the whole conversation again), `--suspends` times each per N,
 *     the two interleaved.
 *  2. Recovery latency: `--kills` times, a long job's owner is SIGKILLed; owner gone → the new
 *     execution's `run.recovered` (its `ts`). Hosts use FAST_LOSS_HOST_ENV's bounds (heartbeat
 *     1 s, lost after 4 s, reaper every 200 ms), so the figure is mostly that bound.
 *  3. Hand-off latency: `--kills` times, the owner gets SIGTERM with HOST_SHUTDOWN_GRACE_MS 500:
 *     SIGTERM → `run.recovered` on another host.
 * Prints p50 / p95 / max with the load average (a shared machine: rerun on a quiet one).
 */
import { randomBytes, randomUUID } from "node:crypto";
import { drizzle } from "drizzle-orm/node-postgres";
import pg from "pg";
import { appendJournal } from "../../src/db/journal-repo";
import { heartbeat } from "../../src/db/ownership-repo";
import * as schema from "../../src/db/schema";
import { suspendJob } from "../../src/db/wait-repo";
import { sleep } from "../../src/domain/async";
import { claimJob, markStarted } from "../lib/single-row-writes";
import { readSse } from "../lib/sse";
import { type HostHandle, startStack } from "../stack/start";
import { dist, startBench, summary } from "./harness";

const bench = startBench({
  usage: "npm run bench:recovery -- [--kills 10] [--steps 40] [--suspend-steps 5,20,40] [--suspends 7] [--json]",
  options: {
    kills: { type: "string", default: "10" },
    steps: { type: "string", default: "40" },
    "suspend-steps": { type: "string", default: "5,20,40" },
    suspends: { type: "string", default: "7" },
  },
});
const KILLS = Number(bench.args.kills);
const STEPS = Number(bench.args.steps);
const SUSPEND_STEPS = String(bench.args["suspend-steps"]).split(",").map(Number);
const SUSPENDS = Number(bench.args.suspends);
const GRACE_MS = 500;
const FAST_LOSS = { HOST_HEARTBEAT_MS: "1000", HOST_RUN_LOST_AFTER_MS: "4000", HOST_REAP_MS: "200" };

async function walBytes(pool: pg.Pool, run: () => Promise<unknown>): Promise<number> {
  const before = (await pool.query<{ lsn: string }>("SELECT pg_current_wal_lsn()::text AS lsn")).rows[0]?.lsn;
  await run();
  const { rows } = await pool.query<{ d: string }>("SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), $1::pg_lsn) AS d", [
    before,
  ]);
  return Number(rows[0]?.d);
}

async function journalCost(url: string, tenantId: string) {
  const pool = new pg.Pool({ connectionString: url, max: 1 });
  const db = drizzle(pool, { schema });
  const started = async () => {
    const jobId = randomUUID();
    await pool.query(`INSERT INTO jobs (id, tenant_id, input) VALUES ($1, $2, '{"messages":[]}')`, [jobId, tenantId]);
    const token = randomUUID();
    const epoch = (await claimJob(db, jobId, "bench-host", token)) as number;
    const id = { jobId, host: "bench-host", epoch, token, executionId: randomUUID() };
    await markStarted(db, id);
    return id;
  };
  // Incompressible, like most tool output: a repeated character would be TOAST-compressed to
  // nothing and flatter the rewrite.
  const results = Array.from({ length: STEPS }, () => randomBytes(768).toString("base64"));
  try {
    const id = await started();
    const journal: number[] = [];
    for (let i = 1; i <= STEPS; i++) {
      const call = { id: `c${i}`, name: "files__echo", args: { i } };
      // Heartbeat (outside the measurement): the stack's reapers would take a silent job away.
      await heartbeat(db, [id]);
      journal.push(
        await walBytes(pool, async () => {
          const ok = [
            await appendJournal(db, id, [
              { kind: "turn", payload: { turn: i, text: "", calls: [call] } },
              { kind: "call", payload: { call_id: call.id, name: call.name, sandbox: false } },
            ]),
            await appendJournal(db, id, [{ kind: "result", payload: { call_id: call.id, content: results[i - 1] } }]),
          ];
          if (ok.includes(false)) throw new Error(`journal append refused at step ${i}`);
        }),
      );
    }
    const other = await started();
    const rewrite: number[] = [];
    const transcript: unknown[] = [];
    for (let i = 1; i <= STEPS; i++) {
      transcript.push({
        role: "assistant",
        content: "",
        toolCalls: [{ id: `c${i}`, name: "files__echo", args: { i } }],
      });
      transcript.push({ role: "tool", toolCallId: `c${i}`, content: results[i - 1] });
      rewrite.push(
        await walBytes(pool, () =>
          pool.query("UPDATE jobs SET checkpoint = $2::jsonb WHERE id = $1", [
            other.jobId,
            JSON.stringify({ messages: transcript }),
          ]),
        ),
      );
    }
    return { journal, rewrite };
  } finally {
    await pool.end();
  }
}

type Variant = "journal_view" | "transcript";

/** 1b: the suspend statement's WAL and the checkpoint's stored size, per N and checkpoint kind. */
async function suspendCost(url: string, tenantId: string) {
  const pool = new pg.Pool({ connectionString: url, max: 1 });
  const db = drizzle(pool, { schema });
  const out = new Map<string, { wal: number[]; size: number[] }>();
  const input = { role: "user", content: "do the steps" };
  const one = async (steps: number, variant: Variant) => {
    const jobId = randomUUID();
    // Due in an hour: the stack's hosts admit only due jobs, so none claims it before the bench does.
    await pool.query(
      `INSERT INTO jobs (id, tenant_id, input, run_at) VALUES ($1, $2, $3::jsonb, now() + interval '1 hour')`,
      [jobId, tenantId, JSON.stringify({ messages: [input] })],
    );
    const token = randomUUID();
    const epoch = await claimJob(db, jobId, "bench-host", token);
    const id = { jobId, host: "bench-host", epoch: epoch as number, token, executionId: randomUUID() };
    if (epoch === null || !(await markStarted(db, id))) throw new Error(`the bench could not start job ${jobId}`);
    // The run up to the wait, journaled as a run journals it (both kinds of host did).
    const messages: unknown[] = [input];
    for (let i = 1; i <= steps; i++) {
      await heartbeat(db, [id]);
      const call = { id: `c${i}`, name: "files__echo", args: { i } };
      const content = randomBytes(768).toString("base64");
      const ok = [
        await appendJournal(db, id, [
          { kind: "turn", payload: { turn: i, text: "", calls: [call] } },
          { kind: "call", payload: { call_id: call.id, name: call.name, sandbox: false } },
        ]),
        await appendJournal(db, id, [{ kind: "result", payload: { call_id: call.id, content } }]),
      ];
      if (ok.includes(false)) throw new Error(`journal append refused at step ${i}`);
      messages.push({ role: "assistant", content: "", toolCalls: [call] });
      messages.push({ role: "tool", toolCallId: call.id, content });
    }
    const turn = steps + 1;
    const pending = { id: "gated", name: "shell", args: { command: "deploy" } };
    await appendJournal(db, id, [{ kind: "turn", payload: { turn, text: "", calls: [pending] } }]);
    messages.push({ role: "assistant", content: "", toolCalls: [pending] });
    await heartbeat(db, [id]);
    const checkpoint =
      variant === "journal_view"
        ? { v: 2, callId: pending.id, turn }
        : { v: 1, messages, text: "", turn, maxTurns: 100, repaired: false, pending, remaining: [] };
    const wal = await walBytes(pool, async () => {
      const r = await suspendJob(db, id, {
        kind: "approval",
        callId: pending.id,
        tool: pending.name,
        arguments: pending.args,
        question: null,
        deadlineS: 3600,
        onDeadline: "deny",
        checkpoint,
      });
      if (!r.suspended) throw new Error(`the bench job ${jobId} did not suspend`);
    });
    const { rows } = await pool.query<{ size: number }>(
      "SELECT pg_column_size(checkpoint)::int AS size FROM jobs WHERE id = $1",
      [jobId],
    );
    const key = `${steps}/${variant}`;
    const entry = out.get(key) ?? { wal: [], size: [] };
    entry.wal.push(wal);
    entry.size.push(rows[0]?.size ?? Number.NaN);
    out.set(key, entry);
  };
  try {
    for (let r = 0; r < SUSPENDS; r++) {
      for (const steps of SUSPEND_STEPS) {
        // Alternate which goes first, so neither always follows the other's writes.
        const order: Variant[] = r % 2 === 0 ? ["journal_view", "transcript"] : ["transcript", "journal_view"];
        for (const v of order) await one(steps, v);
      }
    }
    return out;
  } finally {
    await pool.end();
  }
}

async function main() {
  console.error("starting a stack with 2 hosts…");
  const stack = await startStack({
    hosts: 2,
    mockModel: { ttftMs: 5, tokensPerS: 2000 },
    hostEnv: { ...FAST_LOSS, HOST_SHUTDOWN_GRACE_MS: String(GRACE_MS) },
  });
  const pool = new pg.Pool({ connectionString: stack.databaseUrl, max: 2 });
  const headers = { authorization: `Bearer ${stack.apiKey}`, "content-type": "application/json" };
  const post = (path: string, body: unknown) =>
    fetch(`${stack.gatewayUrl}${path}`, { method: "POST", headers, body: JSON.stringify(body) });
  try {
    const cost = await journalCost(stack.databaseUrl, stack.tenantId);
    const sum = (xs: number[]) => xs.reduce((a, b) => a + b, 0);
    const at = (xs: number[], n: number) => xs[n - 1] ?? Number.NaN;
    bench.say(`journal, per tool step (2 statements, 1 KiB result): ${summary(cost.journal, 0, "B")}`);
    for (const n of [1, 10, Math.min(STEPS, 20), STEPS]) {
      bench.say(
        `  step ${n}: journal ${at(cost.journal, n)} B (total ${sum(cost.journal.slice(0, n))} B), transcript rewrite ${at(cost.rewrite, n)} B (total ${sum(cost.rewrite.slice(0, n))} B)`,
      );
    }

    const suspends = await suspendCost(stack.databaseUrl, stack.tenantId);
    const suspendFigures: Record<string, unknown> = {};
    bench.say("suspend statement at a gated call after N journaled tool steps (1 KiB result each):");
    for (const n of SUSPEND_STEPS) {
      const view = suspends.get(`${n}/journal_view`);
      const full = suspends.get(`${n}/transcript`);
      if (!view || !full) continue;
      bench.say(
        `  N=${n}: journal view: WAL ${summary(view.wal, 0, "B")}, checkpoint ${summary(view.size, 0, "B")}; transcript copy (before): WAL ${summary(full.wal, 0, "B")}, checkpoint ${summary(full.size, 0, "B")}`,
      );
      suspendFigures[`steps_${n}`] = {
        journal_view: { wal_bytes: dist(view.wal), checkpoint_bytes: dist(view.size) },
        transcript: { wal_bytes: dist(full.wal), checkpoint_bytes: dist(full.size) },
      };
    }

    // A long answer (200 words at 10 tokens/s), so the run is still streaming when its owner goes.
    const long = `!mock ${JSON.stringify({ reply: Array.from({ length: 200 }, (_, i) => `w${i}`).join(" "), tokens_per_s: 10 })}`;
    const measure = async (signal: "SIGKILL" | "SIGTERM"): Promise<number> => {
      const r = await post("/v1/jobs", { input: { messages: [{ role: "user", content: long }] } });
      const id = ((await r.json()) as { job: { id: string } }).job.id;
      let owner: string | null = null;
      for (let i = 0; i < 200 && !owner; i++) {
        const { rows } = await pool.query("SELECT owner, state FROM jobs WHERE id = $1", [id]);
        if (rows[0]?.state === "running") owner = rows[0].owner;
        else await sleep(50);
      }
      await sleep(500); // mid-answer
      const host = stack.hosts.find((h) => h.id === owner) as HostHandle;
      const t0 = Date.now();
      host.process.kill(signal);
      const spare = stack.addHost();
      let recoveredAt = Number.NaN;
      for await (const ev of readSse(`${stack.gatewayUrl}/v1/jobs/${id}/events`, {
        headers,
        signal: AbortSignal.timeout(60_000),
      })) {
        const e = JSON.parse(ev.data) as { type: string; ts: string };
        if (e.type === "run.recovered") {
          recoveredAt = Date.parse(e.ts);
          break;
        }
      }
      await post(`/v1/jobs/${id}/cancel`, {});
      await spare;
      return recoveredAt - t0;
    };
    const lost: number[] = [];
    for (let i = 0; i < KILLS; i++) lost.push(await measure("SIGKILL"));
    bench.say(`recovery (SIGKILL → run.recovered, lost bound 4 s): ${summary(lost)}`);
    const handOff: number[] = [];
    for (let i = 0; i < KILLS; i++) handOff.push(await measure("SIGTERM"));
    bench.say(`hand-off (SIGTERM → run.recovered elsewhere, grace ${GRACE_MS} ms): ${summary(handOff)}`);
    bench.say(`${bench.load()} (1, 5, 15 min; ${(await import("node:os")).cpus().length} cores)`);
    bench.done({
      journal_step_wal_bytes: dist(cost.journal),
      rewrite_step_wal_bytes: dist(cost.rewrite),
      journal_total_wal_bytes: sum(cost.journal),
      rewrite_total_wal_bytes: sum(cost.rewrite),
      recovery_ms: dist(lost),
      hand_off_ms: dist(handOff),
      suspend: suspendFigures,
    });
  } finally {
    await pool.end();
    await stack.stop();
  }
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
