/**
 * A fleet whose only work is a held run, on real processes (the fleet of tools/lib/scale-to-zero.ts):
 * test/integration/held-sleep.test.ts. Two hosts; one job whose model call takes minutes (the
 * mock model's scripted first-token delay), so its owner holds it and heartbeats.
 *
 *  1. The job runs on one host (the owner); the other is waited for until it reports itself
 *     asleep (`host_fleet_asleep` 1): its look found only a held run, and its watch on the
 *     owners' lock (sandbox-host/lifecycle/held-watch.ts) is armed.
 *  2. For the window: Postgres statements per host role (pg_stat_statements), sessions the
 *     sleeper opened (pg_stat_activity backend_start), Redis commands (INFO commandstats).
 *  3. The owner is SIGKILLed; the job must be recovered (re-queued by a reaper and started again,
 *     by the woken host) within the lost bound: HOST_RUN_LOST_AFTER_MS + 1.3 × HOST_REAP_MS after
 *     its last heartbeat, which is at most the kill.
 */
import { loadavg } from "node:os";
import { drizzle } from "drizzle-orm/node-postgres";
import pg from "pg";
import * as schema from "../../src/db/schema";
import { sleep } from "../../src/domain/async";
import { commandsBetween, metric, startSleepFleet, statementsBetween, sum, waitUntil } from "./scale-to-zero";

export interface HeldSleepOptions {
  windowMs: number;
  /** Extra host environment (HOST_WAKE_POLL_MS, …). */
  hostEnv?: Record<string, string>;
  progress?: (line: string) => void;
}

export interface HeldSleepResult {
  windowS: number;
  owner: string;
  sleeper: string;
  /** The sleeper's statements in the window, by text. */
  sleeperStatementTexts: Record<string, number>;
  sleeperStatements: number;
  /** Sessions of the sleeper's role that began in the window (its watch session began before). */
  sleeperNewSessions: number;
  /** The owner's statements in the window, by text: its heartbeat, and its own busy loops. */
  ownerStatementTexts: Record<string, number>;
  /** Every host's Redis commands in the window (one bridge): the sleeper's BLPOPs, and the owner's. */
  redisByCommand: Record<string, number>;
  /** SIGKILL of the owner → the sleeper logged "awake" (its watch saw the owner's session end). */
  awakeAfterKillMs: number | null;
  /** SIGKILL of the owner → the job started again on the other host. */
  recoveredAfterKillMs: number;
  /** The job's `recoveries` once it started again (the reaper's re-queue counts one). */
  recoveries: number;
  hostProblems: string[];
  /** Node's process warnings the hosts printed from their start (a pg deprecation, say). */
  nodeWarnings: string[];
  load: { atStart: number[]; atEnd: number[] };
}

const loadAverage = () => loadavg().map((l) => Math.round(l * 100) / 100);

export async function runHeldSleep(opts: HeldSleepOptions): Promise<HeldSleepResult> {
  const say = opts.progress ?? (() => {});
  const fleet = await startSleepFleet({ hosts: 2, hostEnv: opts.hostEnv });
  const pool = new pg.Pool({ connectionString: fleet.earUrl, max: 1 });
  pool.on("error", () => {});
  try {
    const db = drizzle(pool, { schema });
    // The model's first token comes after 10 minutes: the run is held, and heartbeats, until then.
    const id = await fleet.submit(db, '!mock {"ttft_ms": 600000, "reply": "late"}');
    let ownerId = "";
    await waitUntil("the held job to run", 60_000, async () => {
      const { rows } = await pool.query<{ owner: string | null; state: string }>(
        "SELECT owner, state FROM jobs WHERE id = $1",
        [id],
      );
      ownerId = rows[0]?.owner ?? "";
      return rows[0]?.state === "running";
    });
    const ownerIndex = fleet.hosts.findIndex((h) => h.id === ownerId);
    if (ownerIndex < 0) throw new Error(`the job's owner ${ownerId} is none of the fleet's hosts`);
    const owner = fleet.hosts[ownerIndex] as (typeof fleet.hosts)[number];
    const sleeperIndex = 1 - ownerIndex;
    const sleeper = fleet.hosts[sleeperIndex] as (typeof fleet.hosts)[number];
    say(`the job runs on ${owner.id}; waiting for ${sleeper.id} to sleep…`);
    await waitUntil(
      "the other host asleep",
      90_000,
      async () => (await metric(sleeper, "host_fleet_asleep")) === 1,
    ).catch((err: Error) => {
      throw new Error(`${err.message}; last host lines:\n${fleet.recent.join("\n")}`);
    });
    fleet.watch();
    const sleeperRole = fleet.roles[sleeperIndex] as string;
    const ownerRole = fleet.roles[ownerIndex] as string;
    const loadStart = loadAverage();
    const before = await fleet.snapshot();
    const windowStart = new Date();
    say(`window: ${opts.windowMs / 1000} s…`);
    const t0 = performance.now();
    await sleep(opts.windowMs);
    const windowS = (performance.now() - t0) / 1000;
    const after = await fleet.snapshot();
    const loadEnd = loadAverage();
    const { rows: fresh } = await fleet.observer.query<{ n: string }>(
      "SELECT count(*)::text AS n FROM pg_stat_activity WHERE usename = $1 AND backend_start >= $2",
      [sleeperRole, windowStart],
    );
    const sleeperStatementTexts = statementsBetween(before, after, [sleeperRole]);

    say(`SIGKILL ${owner.id}…`);
    const linesAtKill = fleet.lines();
    const killedAt = Date.now();
    process.kill(-(owner.process.pid as number), "SIGKILL");
    let recoveries = 0;
    await waitUntil("the job started again on the other host", 60_000, async () => {
      const { rows } = await pool.query<{ owner: string | null; state: string; recoveries: number }>(
        "SELECT owner, state, recoveries FROM jobs WHERE id = $1",
        [id],
      );
      recoveries = rows[0]?.recoveries ?? 0;
      return rows[0]?.state === "running" && rows[0]?.owner === sleeper.id;
    });
    const recoveredAfterKillMs = Date.now() - killedAt;
    const awake = fleet.recent
      .slice(Math.max(0, fleet.recent.length - (fleet.lines() - linesAtKill)))
      .find((l) => l.startsWith(`${sleeperIndex + 1}:`) && l.includes('"msg":"awake"'));
    const awakeTs = awake ? /"ts":"([^"]+)"/.exec(awake)?.[1] : undefined;
    return {
      windowS,
      owner: owner.id,
      sleeper: sleeper.id,
      sleeperStatementTexts,
      sleeperStatements: sum(sleeperStatementTexts),
      sleeperNewSessions: Number(fresh[0]?.n ?? 0),
      ownerStatementTexts: statementsBetween(before, after, [ownerRole]),
      redisByCommand: commandsBetween(before, after),
      awakeAfterKillMs: awakeTs ? Date.parse(awakeTs) - killedAt : null,
      recoveredAfterKillMs,
      recoveries,
      hostProblems: fleet.problems,
      nodeWarnings: fleet.nodeWarnings,
      load: { atStart: loadStart, atEnd: loadEnd },
    };
  } finally {
    await pool.end().catch(() => {});
    await fleet.stop();
  }
}
