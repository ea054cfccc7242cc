/**
 * The recovery pass (src/db/recovery-pass.ts) on a real Postgres and a real Redis behind the
 * Upstash bridge: one pass over what dead hosts left behind releases the stale claim, ends the
 * waits past their deadline as configured, marks the silent run lost and the overdue one
 * timed_out, leaves the live run and the wait not yet due alone, and puts exactly what it
 * re-queued into the ready index. Then: a second pass changes nothing, and a re-index that fails
 * (Redis unreachable) is logged while the pass still ends the runs, in the pass and in a host's
 * reaper alike. The cron's use of the pass is test/integration/cron-backstop.test.ts.
 */
import { randomBytes, randomUUID } from "node:crypto";
import { afterAll, describe, expect, it } from "vitest";
import { Reaper } from "../../sandbox-host/reaper/reaper";
import { type RecoveryLimits, recoveryPass } from "../../src/db/recovery-pass";
import { jobs } from "../../src/db/schema";
import { redisKeys } from "../../src/quota/keys";
import { indexReady } from "../../src/quota/ready-index";
import { createRedisClient, type Redis } from "../../src/quota/redis";
import { startUpstashBridge, type UpstashBridge } from "../../tools/bridges/upstash-rest/main";
import { type RedisService, startRedis } from "../../tools/stack/services/redis";
import type { TestDb } from "../helpers/db";
import { claimAsDeadHost, waitAsDeadHost } from "../helpers/dead-host";
import { postgresTest } from "../helpers/postgres-fixture";

const test = postgresTest({ tenants: ["r1"] });
let t: TestDb;
let redisServer: RedisService;
let bridge: UpstashBridge;
let redis: Redis;
/** Nothing listens on port 1: every command fails the way an unreachable Redis does. */
const deadRedis = createRedisClient({ url: "http://127.0.0.1:1", token: "x", retries: 0 });

test.beforeAll(async ({ testDb }) => {
  t = testDb;
  redisServer = await startRedis();
  const token = randomBytes(16).toString("hex");
  bridge = await startUpstashBridge({ redisUrl: redisServer.url, token, log: () => {} });
  redis = createRedisClient({ url: bridge.url, token });
}, 60_000);
afterAll(async () => {
  await bridge?.close();
  await redisServer?.stop();
}, 30_000);

const limits: RecoveryLimits = { claimTimeoutMs: 60_000, runLostAfterMs: 60_000 };

/** What the pass logged, as "level msg" lines. */
function recorder() {
  const lines: string[] = [];
  const at = (level: string) => (msg: string) => void lines.push(`${level} ${msg}`);
  return { lines, log: { info: at("info"), warn: at("warn") } };
}

async function submitted(): Promise<string> {
  const id = randomUUID();
  await t.db.insert(jobs).values({ id, tenantId: "r1", input: { messages: [{ role: "user", content: "x" }] } });
  return id;
}

async function waitingPastDeadline(onDeadline: "deny" | "fail", deadlineS = 0.01): Promise<string> {
  const jobId = await submitted();
  await waitAsDeadHost(t.db, jobId, onDeadline, deadlineS);
  return jobId;
}

/**
 * The leftovers of dead hosts, one of each kind, plus a live run and a wait not yet due. Of the
 * two silent runs, `resumable` may recover (the defaults: no agent, no recovery yet) and
 * `silent` has used up its recoveries.
 */
async function leftovers() {
  const staleClaim = (await claimAsDeadHost(t.db, await submitted(), false)).jobId;
  const silent = (await claimAsDeadHost(t.db, await submitted())).jobId;
  const resumable = (await claimAsDeadHost(t.db, await submitted())).jobId;
  const overdue = (await claimAsDeadHost(t.db, await submitted())).jobId;
  const live = (await claimAsDeadHost(t.db, await submitted())).jobId;
  const deny = await waitingPastDeadline("deny");
  const fail = await waitingPastDeadline("fail");
  const notYet = await waitingPastDeadline("fail", 3600);
  await t.pool.query("UPDATE jobs SET claimed_at = now() - interval '1 hour' WHERE id = $1", [staleClaim]);
  await t.pool.query("UPDATE jobs SET heartbeat_at = now() - interval '1 hour', recoveries = 3 WHERE id = $1", [
    silent,
  ]);
  await t.pool.query("UPDATE jobs SET heartbeat_at = now() - interval '1 hour' WHERE id = $1", [resumable]);
  await t.pool.query("UPDATE jobs SET deadline_at = now() - interval '1 second' WHERE id = $1", [overdue]);
  await new Promise((r) => setTimeout(r, 30)); // past the 10 ms wait deadlines
  return { staleClaim, silent, resumable, overdue, live, deny, fail, notYet };
}

async function states(ids: Record<string, string>): Promise<Record<string, string>> {
  const r = await t.pool.query<{ id: string; state: string }>("SELECT id, state FROM jobs WHERE id = ANY($1::uuid[])", [
    Object.values(ids),
  ]);
  const byId = new Map(r.rows.map((row) => [row.id, row.state]));
  return Object.fromEntries(Object.entries(ids).map(([name, id]) => [name, byId.get(id) ?? "missing"]));
}

describe("the recovery pass", () => {
  it("releases, expires and reaps once, re-indexing exactly what it re-queued; a second pass changes nothing", async () => {
    const ids = await leftovers();
    const key = redisKeys(`recovery-${randomUUID()}`).readyIndex();
    const { lines, log } = recorder();
    const out = await recoveryPass({ db: t.db, limits, log, reindex: (jobs) => indexReady(redis, key, jobs) });

    expect(await states(ids)).toEqual({
      staleClaim: "queued",
      silent: "lost",
      resumable: "queued",
      overdue: "timed_out",
      live: "running",
      deny: "queued",
      fail: "failed",
      notYet: "waiting",
    });
    expect(out.released.map((j) => j.id)).toEqual([ids.staleClaim]);
    expect(out.waitsDenied.map((j) => j.id)).toEqual([ids.deny]);
    expect(out.waitsFailed).toEqual([ids.fail]);
    expect(out.reaped.map((r) => [r.id, r.state]).sort()).toEqual(
      [
        [ids.silent, "lost"],
        [ids.resumable, "recovered"],
        [ids.overdue, "timed_out"],
      ].sort(),
    );
    // The ready index holds the released claim, the denied wait and the recovered run, scored by creation time.
    expect((await redis.zrange<string[]>(key, 0, -1)).sort()).toEqual([ids.staleClaim, ids.deny, ids.resumable].sort());
    expect(await redis.zscore(key, ids.deny)).toBe(out.waitsDenied[0]?.createdAt.getTime());
    expect(lines).toEqual(
      expect.arrayContaining([
        "warn released claims that never started",
        "info waits passed their deadline",
        "warn run lost (owner stopped heartbeating)",
        "warn run's owner stopped heartbeating; job re-queued for a new execution from its journal",
        "warn run timed out",
      ]),
    );

    const again = await recoveryPass({ db: t.db, limits, log, reindex: (jobs) => indexReady(redis, key, jobs) });
    expect(again).toEqual({ released: [], waitsDenied: [], waitsFailed: [], reaped: [] });
  }, 60_000);

  it("a re-index that fails is logged and the pass still expires the waits and reaps the runs", async () => {
    const ids = await leftovers();
    const { lines, log } = recorder();
    const out = await recoveryPass({
      db: t.db,
      limits,
      log,
      reindex: (jobs) => indexReady(deadRedis, "recovery-dead:ready", jobs),
    });
    expect(await states({ deny: ids.deny, silent: ids.silent, overdue: ids.overdue })).toEqual({
      deny: "queued",
      silent: "lost",
      overdue: "timed_out",
    });
    expect(out.released.map((j) => j.id)).toEqual([ids.staleClaim]);
    expect(lines.filter((l) => l === "warn re-queued jobs not re-indexed")).toHaveLength(3);
  }, 60_000);

  it("a host's reaper with Redis unreachable still ends the runs after releasing a claim", async () => {
    const ids = await leftovers();
    const { lines, log } = recorder();
    const reaped: string[] = [];
    const reaper = new Reaper({
      db: t.db,
      redis: deadRedis,
      keys: redisKeys("recovery-dead"),
      log: { ...log, error: () => {} },
      intervalMs: 60_000,
      ...limits,
      onReaped: (r) => reaped.push(r.id),
    });
    await reaper.pass();
    expect(await states(ids)).toMatchObject({
      staleClaim: "queued",
      deny: "queued",
      silent: "lost",
      overdue: "timed_out",
    });
    expect(reaped.sort()).toEqual([ids.silent, ids.resumable, ids.overdue].sort());
    expect(lines).not.toContain("warn reaper pass failed");
  }, 60_000);
});
