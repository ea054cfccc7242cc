/**
 * The lease scripts against a real redis-server, through the real @upstash/redis client and the
 * Upstash bridge (production path) and over raw ioredis (the benchmark's path): one suite, both
 * drivers. Lease semantics users rely on: limit, idempotent retry, multi-key atomicity, expiry on
 * the server's clock, renew never resurrects, late release harmless, fair waiter queue.
 */
import { randomBytes } from "node:crypto";
import { readFile } from "node:fs/promises";
import { Redis as IORedis } from "ioredis";
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest";
import { ioredisLuaRunner } from "../../sandbox-host/quota/ioredis-runner";
import { loadQuotaScripts } from "../../sandbox-host/quota/load-scripts";
import { sleep } from "../../src/domain/async";
import { redisKeys } from "../../src/quota/keys";
import { createLeaseStore, type LeaseStoreOptions } from "../../src/quota/lease-store";
import { createRedisClient } from "../../src/quota/redis";
import { type LuaRunner, type QuotaScripts, upstashLuaRunner } from "../../src/quota/scripts";
import { startUpstashBridge, type UpstashBridge } from "../../tools/bridges/upstash-rest/main";
import { type RedisService, startRedis } from "../../tools/stack/services/redis";
import { requireBinary } from "../helpers/require";

const canRun = await requireBinary("redis-server", "apt-get install redis-server");

describe.skipIf(!canRun)("quota lease store", () => {
  let redis: RedisService;
  let bridge: UpstashBridge;
  let direct: IORedis;
  let viaTcp: IORedis;
  let scripts: QuotaScripts;
  const runners: Record<string, LuaRunner> = {};

  beforeAll(async () => {
    redis = await startRedis();
    const token = randomBytes(16).toString("hex");
    bridge = await startUpstashBridge({ redisUrl: redis.url, token, log: () => {} });
    direct = new IORedis(redis.url, { protocol: 2 });
    scripts = await loadQuotaScripts();
    runners.upstash = upstashLuaRunner(createRedisClient({ url: bridge.url, token }));
    viaTcp = new IORedis(redis.url, { protocol: 2 });
    runners.ioredis = ioredisLuaRunner(viaTcp);
  });
  afterAll(async () => {
    direct?.disconnect();
    viaTcp?.disconnect();
    await bridge?.close();
    await redis?.stop();
  });
  beforeEach(async () => {
    await direct.flushall();
  });

  it("loads the script text exactly as the .lua files hold it", async () => {
    for (const name of ["acquire", "renew", "release", "settle"] as const) {
      const file = await readFile(new URL(`../../src/quota/lua/${name}.lua`, import.meta.url), "utf8");
      expect(scripts[name]).toBe(file);
      expect(scripts[name].length).toBeGreaterThan(100);
    }
  });

  for (const driver of ["upstash", "ioredis"] as const) {
    describe(driver, () => {
      const keys = redisKeys("t");
      const store = (opts: LeaseStoreOptions = {}) =>
        createLeaseStore(runners[driver]!, scripts, { keys, leaseTimeoutMs: 10_000, ...opts });
      const members = (quotaKey: string) => direct.zrange(keys.quotaLeases(quotaKey), "0", "-1");

      it("admits up to the limit, refuses beyond it, and a retry with the same id takes no second slot", async () => {
        const s = store();
        const m = [{ key: "m", limit: 2 }];
        expect((await s.acquire("a", m)).admitted).toBe(true);
        expect((await s.acquire("b", m)).admitted).toBe(true);
        expect(await s.acquire("c", m)).toMatchObject({ admitted: false, reason: "limit_reached", key: "m", free: 0 });
        expect((await s.acquire("a", m)).admitted).toBe(true); // idempotent retry
        expect((await members("m")).sort()).toEqual(["a", "b"]);
        expect(await direct.exists(keys.quotaWaiters("m"))).toBe(0); // a refused try leaves no trace
      });

      it("is atomic across keys: one full key adds the holder nowhere", async () => {
        const s = store();
        expect((await s.acquire("t1-run", [{ key: "tenant:1", limit: 1 }])).admitted).toBe(true);
        const both = [
          { key: "model", limit: 5 },
          { key: "tenant:1", limit: 1 },
        ];
        expect(await s.acquire("x", both)).toMatchObject({ admitted: false, key: "tenant:1" });
        expect(await members("model")).toEqual([]);
        expect(await members("tenant:1")).toEqual(["t1-run"]);
        await s.release({ holder: "t1-run", keys: ["tenant:1"] });
        expect((await s.acquire("x", both)).admitted).toBe(true);
        expect(await members("model")).toEqual(["x"]);
        expect(await members("tenant:1")).toEqual(["x"]);
      });

      describe("budgets: reserve, then settle", () => {
        const m = [{ key: "m", limit: 100 }];
        const budget = (amountNano: number, limitNano = 1000, floorNano = 0) => [
          { key: "day", limitNano, amountNano, floorNano, ttlMs: 60_000 },
        ];
        const spent = async () => Number((await direct.get(keys.budgetSpent("day"))) ?? 0);

        it("admits while spend plus reservations is under the limit, with the slots in one script", async () => {
          const s = store();
          const a = await s.acquire("a", m, { budgets: budget(600) });
          expect(a.admitted && a.lease.budgets).toEqual(["day"]);
          // 600 reserved < 1000: admitted, and reserves its own 600 (the overrun bound: one reservation).
          expect((await s.acquire("b", m, { budgets: budget(600) })).admitted).toBe(true);
          expect(await s.acquire("c", m, { budgets: budget(1) })).toEqual({
            admitted: false,
            reason: "budget_exhausted",
            key: "day",
            spentNano: 0,
            reservedNano: 1200,
            limitNano: 1000,
          });
          // Refused by the budget: no slot taken either.
          expect((await members("m")).sort()).toEqual(["a", "b"]);
          expect(await s.acquire("a", m, { budgets: budget(600) })).toMatchObject({ admitted: true }); // idempotent
          expect(s.stats()).toMatchObject({ reserved: 3, budgetRefused: 1 });
        });

        it("settles to the real cost once per holder, however often it is sent", async () => {
          const s = store();
          const a = await s.acquire("a", m, { budgets: budget(900) });
          expect(a.admitted).toBe(true);
          expect(await s.settle("a", [{ key: "day", amountNano: 250, ttlMs: 60_000 }])).toBe("counted");
          expect(await s.settle("a", [{ key: "day", amountNano: 250, ttlMs: 60_000 }])).toBe("repeated");
          expect(await spent()).toBe(250);
          expect(await direct.zcard(keys.budgetReservations("day"))).toBe(0);
          expect(await direct.hlen(keys.budgetAmounts("day"))).toBe(0);
          // 250 spent + 0 reserved < 1000: admitted; then 250 + 750 reserved reaches the limit.
          expect((await s.acquire("b", m, { budgets: budget(750) })).admitted).toBe(true);
          expect(await s.acquire("c", m, { budgets: budget(1) })).toMatchObject({
            reason: "budget_exhausted",
            spentNano: 250,
            reservedNano: 750,
          });
          expect(await direct.pttl(keys.budgetSpent("day"))).toBeGreaterThan(50_000);
        });

        it("a holder that dies unsettled gives its reservation back at the lease timeout; a renewing one keeps it", async () => {
          const s = store({ leaseTimeoutMs: 300 });
          const dead = await s.acquire("dead", m, { budgets: budget(700) });
          const alive = await s.acquire("alive", m, { budgets: budget(300) });
          if (!dead.admitted || !alive.admitted) throw new Error("not admitted");
          expect((await s.acquire("x", m, { budgets: budget(1) })).admitted).toBe(false);
          for (let i = 0; i < 4; i++) {
            await sleep(100);
            expect((await s.renew([alive.lease])).lost).toEqual([]);
          }
          // 400 ms: dead's 700 expired, alive's 300 still held (renewed with its lease).
          expect((await s.acquire("x", m, { budgets: budget(1) })).admitted).toBe(true);
          expect((await direct.zrange(keys.budgetReservations("day"), "0", "-1")).sort()).toEqual(["alive", "x"]);
          expect(await direct.hget(keys.budgetAmounts("day"), "dead")).toBeNull();
          // A late settle of the dead holder still counts its call, once.
          expect(await s.settle("dead", [{ key: "day", amountNano: 40, ttlMs: 60_000 }])).toBe("counted");
          expect(await s.settle("dead", [{ key: "day", amountNano: 40, ttlMs: 60_000 }])).toBe("repeated");
          expect(await spent()).toBe(40);
        });

        it("never counts from below the ledger's floor when Redis lost the counter", async () => {
          const s = store();
          expect(await s.acquire("a", m, { budgets: budget(10, 1000, 995) })).toMatchObject({ admitted: true });
          expect(await spent()).toBe(995);
          expect(await s.acquire("b", m, { budgets: budget(10, 1000, 995) })).toMatchObject({
            reason: "budget_exhausted",
            spentNano: 995,
            reservedNano: 10,
          });
        });

        it("reserves without a slot when the model has no quota", async () => {
          const s = store();
          const a = await s.acquire("a", [], { budgets: budget(2000) });
          expect(a.admitted && a.lease.keys).toEqual([]);
          expect(await s.acquire("b", [], { budgets: budget(1) })).toMatchObject({ reason: "budget_exhausted" });
          if (a.admitted) expect(await s.release(a.lease)).toBe(false); // nothing to free; the reservation stays until settled
          expect(await direct.zcard(keys.budgetReservations("day"))).toBe(1);
        });
      });

      it("scores leases with the Redis server's clock, whatever the host clock says", async () => {
        const hostClockOneHourAhead = () => performance.now() + 3_600_000;
        const s = store({ now: hostClockOneHourAhead });
        const res = await s.acquire("a", [{ key: "m", limit: 1 }]);
        const [sec, usec] = await direct.time();
        const serverMs = Number(sec) * 1000 + Math.floor(Number(usec) / 1000);
        const score = Number(await direct.zscore(keys.quotaLeases("m"), "a"));
        expect(Math.abs(score - serverMs)).toBeLessThan(200);
        expect(res.admitted && Math.abs(res.serverTimeMs - score)).toBe(0);
      });

      it("expires a holder that stops renewing, and only then frees its slot", async () => {
        const s = store({ leaseTimeoutMs: 300 });
        const m = [{ key: "m", limit: 1 }];
        expect((await s.acquire("crashed", m)).admitted).toBe(true);
        expect((await s.acquire("next", m)).admitted).toBe(false);
        await sleep(350);
        expect((await s.acquire("next", m)).admitted).toBe(true);
        expect(await members("m")).toEqual(["next"]);
      });

      it("keeps a renewing holder past the lease timeout", async () => {
        const s = store({ leaseTimeoutMs: 300 });
        const got = await s.acquire("alive", [{ key: "m", limit: 1 }]);
        if (!got.admitted) throw new Error("not admitted");
        for (let i = 0; i < 5; i++) {
          await sleep(100);
          expect((await s.renew([got.lease])).lost).toEqual([]);
        }
        expect(s.isValid(got.lease)).toBe(true);
        expect((await s.acquire("other", [{ key: "m", limit: 1 }])).admitted).toBe(false);
      });

      it("renews many holders in one call and never resurrects a purged or expired lease", async () => {
        const s = store({ leaseTimeoutMs: 300 });
        let calls = 0;
        const counting: LuaRunner = {
          evalScript: (...a) => {
            calls += 1;
            return runners[driver]!.evalScript(...a);
          },
        };
        const counted = createLeaseStore(counting, scripts, { keys, leaseTimeoutMs: 300 });
        const leases = [];
        for (const h of ["h1", "h2", "h3", "h4"]) {
          const r = await s.acquire(h, [{ key: "m", limit: 5 }]);
          if (r.admitted) leases.push(r.lease);
        }
        await sleep(350); // all expired, none purged yet (no acquire ran)
        const fresh = await s.acquire("h5", [{ key: "other", limit: 5 }]);
        if (!fresh.admitted) throw new Error("not admitted");
        calls = 0;
        const { renewed, lost } = await counted.renew([...leases, fresh.lease]);
        expect(calls).toBe(1);
        expect(lost.map((l) => l.holder)).toEqual(["h1", "h2", "h3", "h4"]);
        expect(renewed.map((l) => l.holder)).toEqual(["h5"]);
        expect(await members("m")).toEqual([]); // expired-but-unpurged entries are removed, not refreshed
        expect((await counted.renew(leases)).lost).toHaveLength(4); // and stay gone
        expect(await members("m")).toEqual([]);
      });

      it("drops a multi-key holder from all its keys when it lost one of them", async () => {
        const s = store({ leaseTimeoutMs: 300 });
        const r = await s.acquire("a", [
          { key: "model", limit: 5 },
          { key: "tenant", limit: 5 },
        ]);
        if (!r.admitted) throw new Error("not admitted");
        await direct.zrem(keys.quotaLeases("tenant"), "a"); // as if purged there
        expect((await s.renew([r.lease])).lost).toHaveLength(1);
        expect(await members("model")).toEqual([]);
      });

      it("a late release is harmless: it cannot free another holder's slot", async () => {
        const s = store({ leaseTimeoutMs: 200 });
        const m = [{ key: "m", limit: 1 }];
        expect((await s.acquire("old", m)).admitted).toBe(true);
        await sleep(250);
        expect((await s.acquire("new", m)).admitted).toBe(true);
        expect(await s.release({ holder: "old", keys: ["m"] })).toBe(false);
        expect(await s.release({ holder: "old", keys: ["m"] })).toBe(false);
        expect(await members("m")).toEqual(["new"]);
        expect((await s.acquire("third", m)).admitted).toBe(false);
        expect(await s.release({ holder: "new", keys: ["m"] })).toBe(true);
        expect(await s.release({ holder: "new", keys: ["m"] })).toBe(false);
      });

      it("admits queued waiters in arrival order and keeps newcomers behind them", async () => {
        const s = store();
        const m = [{ key: "m", limit: 1 }];
        await s.acquire("holder", m);
        expect(await s.acquire("w1", m, { queue: true })).toMatchObject({ admitted: false, ahead: 0 });
        expect(await s.acquire("w2", m, { queue: true })).toMatchObject({ admitted: false, ahead: 1 });
        expect(await s.acquire("w1", m, { queue: true })).toMatchObject({ admitted: false, ahead: 0 }); // keeps its ticket
        await s.release({ holder: "holder", keys: ["m"] });
        expect(await s.acquire("w2", m, { queue: true })).toMatchObject({ admitted: false, ahead: 1, free: 1 });
        expect(await s.acquire("late", m)).toMatchObject({ admitted: false, free: 1 }); // free slot, but w1 is first
        expect((await s.acquire("w1", m, { queue: true })).admitted).toBe(true);
        expect(await direct.zrange(keys.quotaWaiters("m"), "0", "-1")).toEqual(["w2"]);
      });

      it("forgets a waiter that stopped polling, so it cannot block the queue", async () => {
        const s = store({ waiterTimeoutMs: 200 });
        const m = [{ key: "m", limit: 1 }];
        await s.acquire("holder", m);
        await s.acquire("gone", m, { queue: true });
        await s.release({ holder: "holder", keys: ["m"] });
        expect((await s.acquire("w", m, { queue: true })).admitted).toBe(false);
        await sleep(250);
        expect((await s.acquire("w", m, { queue: true })).admitted).toBe(true);
      });

      it("queues a multi-key waiter only on the key that refused it (no head-of-line blocking)", async () => {
        const s = store();
        await s.acquire("t-run", [{ key: "tenant", limit: 1 }]);
        const both = [
          { key: "model", limit: 2 },
          { key: "tenant", limit: 1 },
        ];
        expect(await s.acquire("x", both, { queue: true })).toMatchObject({ admitted: false, key: "tenant" });
        expect(await direct.zcard(keys.quotaWaiters("model"))).toBe(0);
        expect((await s.acquire("y", [{ key: "model", limit: 2 }])).admitted).toBe(true);
      });
    });
  }
});
