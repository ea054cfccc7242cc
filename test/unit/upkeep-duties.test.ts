/**
 * The host's upkeep duties (sandbox-host/reaper/) that exist only for waiting jobs, the expiry
 * sweep and the ready-index rebuild, skip their work while the fleet is idle (the reaper's last
 * look found nothing waiting anywhere), and do it anyway when that look failed: a failed look
 * knows nothing. Driven by hand (`sweep()`, `check()`), with a database and a Redis that only
 * count what they are asked.
 */
import { describe, expect, it } from "vitest";
import { FleetActivity } from "../../sandbox-host/lifecycle/activity";
import { silentLogger } from "../../sandbox-host/log";
import { ExpirySweep } from "../../sandbox-host/reaper/expiry";
import { IndexRebuild } from "../../sandbox-host/reaper/index-rebuild";
import type { Db } from "../../src/db/client";
import { redisKeys } from "../../src/quota/keys";
import type { Redis } from "../../src/quota/redis";

const NOTHING = { waiting: false, claimed: false, running: false };

function fakes() {
  const asked = { statements: 0, redis: 0 };
  const db = {
    execute: async () => {
      asked.statements++;
      return { rows: [] };
    },
  } as unknown as Db;
  const redis = new Proxy(
    {},
    {
      get: () => async () => {
        asked.redis++;
        return null;
      },
    },
  ) as Redis;
  return { asked, db, redis };
}

/** An activity that has looked once and found the fleet empty: idle. */
function idleActivity(): FleetActivity {
  const activity = new FleetActivity({ idleMs: 60_000, localRuns: () => 0, listening: () => true });
  activity.looked(NOTHING, Date.now() + 1);
  expect(activity.idle).toBe(true);
  return activity;
}

describe("upkeep duties for waiting jobs", () => {
  it("the expiry sweep runs while busy, skips while idle, and runs after a failed look", async () => {
    const { asked, db } = fakes();
    const busy = new FleetActivity({ idleMs: 60_000, localRuns: () => 0, listening: () => true });
    await new ExpirySweep({ db, log: silentLogger, intervalMs: 2000, activity: busy }).sweep();
    expect(asked.statements).toBe(1);

    const activity = idleActivity();
    const sweep = new ExpirySweep({ db, log: silentLogger, intervalMs: 2000, activity });
    await sweep.sweep();
    expect(asked.statements).toBe(1);
    activity.lookFailed();
    await sweep.sweep();
    expect(asked.statements).toBe(2);
    // A look that succeeds again is believed again.
    activity.looked(NOTHING, Date.now() + 1);
    await sweep.sweep();
    expect(asked.statements).toBe(2);
  });

  it("the index rebuild sends no Redis command while idle, and checks after a failed look", async () => {
    const { asked, db, redis } = fakes();
    const activity = idleActivity();
    const rebuild = new IndexRebuild({
      db,
      redis,
      keys: redisKeys("upkeep"),
      log: silentLogger,
      checkMs: 2000,
      rebuildMs: 30_000,
      activity,
    });
    await rebuild.check();
    expect(asked).toEqual({ statements: 0, redis: 0 });
    activity.lookFailed();
    await rebuild.check();
    // The marker was missing (the fake answers null): read, rebuilt from Postgres, set again.
    expect(asked.statements).toBe(1);
    expect(asked.redis).toBeGreaterThanOrEqual(2);
  });
});
