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
 *     The owner's own loops are quiet too (lifecycle/activity.ts: its runs are the fleet's only
 *     work), so its statements are its heartbeats and a few backstops a HOST_IDLE_MS.
 *  3. A quick job is submitted the way the gateway does: enqueue→started (Postgres clock). Then
 *     the other host is waited for until it sleeps again.
 *  4. The owner is SIGKILLed; the job must be recovered (re-queued by a reaper and started again,
 *     by the woken host) within the lost bound: HOST_RUN_LOST_AFTER_MS + 1.3 × HOST_REAP_MS after
 *     its last heartbeat, which is at most the kill.
 *  5. The host that now holds it is waited for until it is quiet over its run (`host_fleet_idle`
 *     1), and the job is cancelled in Postgres alone (no Redis hint): the owner's cancel watch is
 *     on its minute backstop then, so only the `ear_cancel` notification ends the run at once.
 *
 * runTwoOwners: two hosts of one run slot each, each holding a run. Both go quiet over their
 * runs, each watching the other's own lock (sandbox-host/lifecycle/held-watch.ts OwnersWatch):
 * for the window their statements are their heartbeats and the idle-period backstops, and no
 * session is opened. Then one is SIGKILLed: the other's watch sees its sessions end, the other
 * goes busy, and its reaper must re-queue the job within the same bound.
 */
import { loadavg } from "node:os";
import { drizzle } from "drizzle-orm/node-postgres";
import pg from "pg";
import { requestCancel } from "../../src/db/control-repo";
import * as schema from "../../src/db/schema";
import { sleep } from "../../src/domain/async";
import {
  commandsBetween,
  finished,
  metric,
  type SleepFleet,
  startSleepFleet,
  statementsBetween,
  sum,
  waitUntil,
} from "./scale-to-zero";

export interface HeldSleepOptions {
  windowMs: number;
  /** After the other host sleeps, before the window: the owner's look finds its run alone (default 15 s). */
  settleMs?: number;
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
  /** The owner's statements in the window, by text: its heartbeats, and its loops' idle-period backstops. */
  ownerStatementTexts: Record<string, number>;
  /** A quick job submitted after the window: enqueue→started (Postgres clock). */
  submitStartedMs: number;
  /** The host that ran it, and the hosts' log lines from its submit to its end. */
  submitHost: string | null;
  submitTrace: string[];
  /** Every host's Redis commands in the window (one bridge): the sleeper's BLPOPs, and the owner's. */
  redisByCommand: Record<string, number>;
  /** SIGKILL of the owner → the sleeper logged "awake" (its watch saw the owner's session end). */
  awakeAfterKillMs: number | null;
  /** SIGKILL of the owner → the job started again on the other host. */
  recoveredAfterKillMs: number;
  /** The job's `recoveries` once it started again (the reaper's re-queue counts one). */
  recoveries: number;
  /** Its cancel (Postgres only) on a quiet owner → `cancelled` (Postgres clock). */
  cancelEndedMs: number;
  /** Host warnings from the window to the recovery (before the cancel). */
  hostProblems: string[];
  /** Node's process warnings the hosts printed from their start (a pg deprecation, say). */
  nodeWarnings: string[];
  load: { atStart: number[]; atEnd: number[] };
}

const loadAverage = () => loadavg().map((l) => Math.round(l * 100) / 100);

/** The model's first token comes after 10 minutes: the run is held, and heartbeats, until then. */
const HELD_PROMPT = '!mock {"ttft_ms": 600000, "reply": "late"}';

/** Waits until the job runs; its owner. */
async function runningOn(pool: pg.Pool, id: string): Promise<string> {
  let owner = "";
  await waitUntil(`job ${id} to run`, 60_000, async () => {
    const { rows } = await pool.query<{ owner: string | null; state: string }>(
      "SELECT owner, state FROM jobs WHERE id = $1",
      [id],
    );
    owner = rows[0]?.owner ?? "";
    return rows[0]?.state === "running";
  });
  return owner;
}

/**
 * A counted window: the fleet's log watch on, a snapshot of statements and Redis commands before
 * and after `windowMs`, and the sessions `roles` opened in it.
 */
async function countWindow(fleet: SleepFleet, windowMs: number, roles: string[]) {
  fleet.watch();
  const atStart = loadAverage();
  const before = await fleet.snapshot();
  const windowStart = new Date();
  const t0 = performance.now();
  await sleep(windowMs);
  const windowS = (performance.now() - t0) / 1000;
  const after = await fleet.snapshot();
  const atEnd = loadAverage();
  const { rows } = await fleet.observer.query<{ n: string }>(
    "SELECT count(*)::text AS n FROM pg_stat_activity WHERE usename = ANY($1) AND backend_start >= $2",
    [roles, windowStart],
  );
  return { windowS, before, after, newSessions: Number(rows[0]?.n ?? 0), load: { atStart, atEnd } };
}

async function asleep(fleet: SleepFleet, host: SleepFleet["hosts"][number]): Promise<void> {
  await waitUntil("the other host asleep", 90_000, async () => (await metric(host, "host_fleet_asleep")) === 1).catch(
    (err: Error) => {
      throw new Error(`${err.message}; last host lines:\n${fleet.recent.join("\n")}`);
    },
  );
}

export async function runHeldSleep(opts: HeldSleepOptions): Promise<HeldSleepResult> {
  const say = opts.progress ?? (() => {});
  const fleet = await startSleepFleet({ hosts: 2, hostEnv: opts.hostEnv });
  const pool = new pg.Pool({ connectionString: fleet.earUrl, max: 1 });
  pool.on("error", () => {});
  try {
    const db = drizzle(pool, { schema });
    const id = await fleet.submit(db, HELD_PROMPT);
    const ownerId = await runningOn(pool, id);
    const ownerIndex = fleet.hosts.findIndex((h) => h.id === ownerId);
    if (ownerIndex < 0) throw new Error(`the job's owner ${ownerId} is none of the fleet's hosts`);
    const owner = fleet.hosts[ownerIndex] as (typeof fleet.hosts)[number];
    const sleeperIndex = 1 - ownerIndex;
    const sleeper = fleet.hosts[sleeperIndex] as (typeof fleet.hosts)[number];
    say(`the job runs on ${owner.id}; waiting for ${sleeper.id} to sleep…`);
    await asleep(fleet, sleeper);
    // The owner's quiet needs a look after BUSY_LOOK_GAP_MS (10 s) without news, and its busy
    // loops' last passes to end: measured from when its look found its run alone.
    await sleep(opts.settleMs ?? 15_000);
    const sleeperRole = fleet.roles[sleeperIndex] as string;
    const ownerRole = fleet.roles[ownerIndex] as string;
    say(`window: ${opts.windowMs / 1000} s…`);
    const { windowS, before, after, newSessions, load } = await countWindow(fleet, opts.windowMs, [sleeperRole]);
    const sleeperStatementTexts = statementsBetween(before, after, [sleeperRole]);

    say("a quick job…");
    const linesAtSubmit = fleet.lines();
    const quick = await fleet.submit(db, "hello");
    const submitStartedMs = await finished(pool, quick);
    const { rows: ran } = await pool.query<{ host: string }>("SELECT host FROM executions WHERE job_id = $1", [quick]);
    const submitTrace = fleet.recent
      .slice(Math.max(0, fleet.recent.length - (fleet.lines() - linesAtSubmit)))
      .map((l) => l.slice(0, 160));
    say(`started ${Math.round(submitStartedMs)} ms after its submit; waiting for ${sleeper.id} to sleep again…`);
    // The submit's poke woke it (the gauge may not have moved yet when the job is already over).
    await waitUntil(
      "the other host woken by the submit",
      10_000,
      async () => (await metric(sleeper, "host_fleet_asleep")) === 0,
    );
    await asleep(fleet, sleeper);

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
    const problemsBeforeCancel = [...fleet.problems];

    say("waiting for the new owner to be quiet over its run, then a cancel…");
    await waitUntil(
      "the new owner quiet over its run",
      60_000,
      async () => (await metric(sleeper, "host_fleet_idle")) === 1,
    );
    const { rows: own } = await pool.query<{ tenant_id: string }>("SELECT tenant_id FROM jobs WHERE id = $1", [id]);
    await requestCancel(db, own[0]?.tenant_id as string, id);
    let cancelEndedMs = 0;
    await waitUntil("the cancelled job to end", 30_000, async () => {
      const { rows } = await pool.query<{ state: string; ms: number | null }>(
        "SELECT state, extract(epoch FROM finished_at - cancel_requested_at) * 1000 AS ms FROM jobs WHERE id = $1",
        [id],
      );
      cancelEndedMs = Number(rows[0]?.ms ?? 0);
      return rows[0]?.state === "cancelled";
    });
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
      sleeperNewSessions: newSessions,
      ownerStatementTexts: statementsBetween(before, after, [ownerRole]),
      submitStartedMs,
      submitHost: ran[0]?.host ?? null,
      submitTrace,
      redisByCommand: commandsBetween(before, after),
      awakeAfterKillMs: awakeTs ? Date.parse(awakeTs) - killedAt : null,
      recoveredAfterKillMs,
      recoveries,
      cancelEndedMs,
      hostProblems: problemsBeforeCancel,
      nodeWarnings: fleet.nodeWarnings,
      load,
    };
  } finally {
    await pool.end().catch(() => {});
    await fleet.stop();
  }
}

export interface TwoOwnersResult {
  owners: [string, string];
  /** From both runs held to both owners quiet over them (`host_fleet_idle` 1 on each). */
  quietAfterMs: number;
  windowS: number;
  /** Each owner's statements in the window, by text (its heartbeats, its idle-period backstops). */
  ownerStatementTexts: [Record<string, number>, Record<string, number>];
  /** Sessions either owner's role began in the window (each watch session began before it). */
  newSessions: number;
  /** Every host's Redis commands in the window. */
  redisByCommand: Record<string, number>;
  /** SIGKILL of the first owner → the survivor logged that it is no longer quiet (its watch). */
  busyAfterKillMs: number | null;
  /** SIGKILL of the first owner → its job re-queued (`recoveries` 1) by the other's reaper. */
  recoveredAfterKillMs: number;
  hostProblems: string[];
  nodeWarnings: string[];
  load: { atStart: number[]; atEnd: number[] };
}

export async function runTwoOwners(opts: {
  /** The window in which both owners are quiet and their statements counted. */
  windowMs: number;
  hostEnv?: Record<string, string>;
  progress?: (line: string) => void;
}): Promise<TwoOwnersResult> {
  const say = opts.progress ?? (() => {});
  // One run slot each: the two held jobs land on different hosts.
  const fleet = await startSleepFleet({ hosts: 2, hostEnv: { ...opts.hostEnv, HOST_MAX_RUNS: "1" } });
  const pool = new pg.Pool({ connectionString: fleet.earUrl, max: 1 });
  pool.on("error", () => {});
  try {
    const db = drizzle(pool, { schema });
    const a = await fleet.submit(db, HELD_PROMPT);
    const b = await fleet.submit(db, HELD_PROMPT);
    const owners = [await runningOn(pool, a), await runningOn(pool, b)] as [string, string];
    if (owners[0] === owners[1]) throw new Error(`both jobs run on ${owners[0]} (one run slot each)`);
    const hosts = owners.map((id) => {
      const i = fleet.hosts.findIndex((h) => h.id === id);
      if (i < 0) throw new Error(`the owner ${id} is none of the fleet's hosts`);
      return { handle: fleet.hosts[i] as (typeof fleet.hosts)[number], role: fleet.roles[i] as string, index: i };
    }) as [
      { handle: SleepFleet["hosts"][number]; role: string; index: number },
      { handle: SleepFleet["hosts"][number]; role: string; index: number },
    ];
    say(`held on ${owners.join(" and ")}; waiting for both to be quiet over them…`);
    const heldAt = Date.now();
    await waitUntil("both owners quiet over their runs (each watching the other)", 90_000, async () => {
      for (const h of hosts) if ((await metric(h.handle, "host_fleet_idle")) !== 1) return false;
      return true;
    }).catch((err: Error) => {
      throw new Error(`${err.message}; last host lines:\n${fleet.recent.join("\n")}`);
    });
    const quietAfterMs = Date.now() - heldAt;
    // Their busy loops' last passes end (as runHeldSleep's settle after the owner's look).
    await sleep(5_000);
    say(`window: ${opts.windowMs / 1000} s…`);
    const { windowS, before, after, newSessions, load } = await countWindow(
      fleet,
      opts.windowMs,
      hosts.map((h) => h.role),
    );
    const victim = hosts[0];
    say(`SIGKILL ${victim.handle.id}…`);
    const linesAtKill = fleet.lines();
    const killedAt = Date.now();
    process.kill(-(victim.handle.process.pid as number), "SIGKILL");
    await waitUntil("the killed owner's job re-queued", 60_000, async () => {
      const { rows } = await pool.query<{ recoveries: number }>("SELECT recoveries FROM jobs WHERE id = $1", [a]);
      return (rows[0]?.recoveries ?? 0) >= 1;
    });
    const recoveredAfterKillMs = Date.now() - killedAt;
    const busy = fleet.recent
      .slice(Math.max(0, fleet.recent.length - (fleet.lines() - linesAtKill)))
      .find((l) => l.startsWith(`${hosts[1].index + 1}:`) && l.includes('"msg":"other owner gone: busy"'));
    const busyTs = busy ? /"ts":"([^"]+)"/.exec(busy)?.[1] : undefined;
    return {
      owners,
      quietAfterMs,
      windowS,
      ownerStatementTexts: [
        statementsBetween(before, after, [hosts[0].role]),
        statementsBetween(before, after, [hosts[1].role]),
      ],
      newSessions,
      redisByCommand: commandsBetween(before, after),
      busyAfterKillMs: busyTs ? Date.parse(busyTs) - killedAt : null,
      recoveredAfterKillMs,
      hostProblems: fleet.problems,
      nodeWarnings: fleet.nodeWarnings,
      load,
    };
  } finally {
    await pool.end().catch(() => {});
    await fleet.stop();
  }
}
