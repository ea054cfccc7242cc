/**
 * When a host sleeps and what wakes it (sandbox-host/lifecycle/sleep.ts), with Redis and the
 * REST BLPOP faked: it sleeps after a quiet look (registered, LISTEN no longer reconnecting), stays
 * idle without LISTEN while asleep, and wakes on a poke, at its deadline, on news, or when the wait
 * fails, each time hurrying the loops and resuming LISTEN.
 */
import { describe, expect, it } from "vitest";
import { FleetActivity } from "../../sandbox-host/lifecycle/activity";
import type { HeldWatch } from "../../sandbox-host/lifecycle/held-watch";
import { FleetSleep } from "../../sandbox-host/lifecycle/sleep";
import { silentLogger } from "../../sandbox-host/log";
import { sleep } from "../../src/domain/async";
import { UNREGISTER_SLEEPER } from "../../src/quota/fleet-wake";
import { redisKeys } from "../../src/quota/keys";
import type { Redis } from "../../src/quota/redis";

const NONE = { waiting: false, claimed: false, running: false };

/** A watch of the held runs' owners (lifecycle/held-watch.ts) whose lock is held until `release`. */
function fakeHeldWatch(holder: boolean) {
  const w = { armed: 0, disarmed: 0, release: () => {} };
  const watch: HeldWatch = {
    arm: async () => {
      w.armed++;
      if (!holder) return null;
      return { released: new Promise<void>((resolve) => (w.release = resolve)) };
    },
    disarm: () => {
      w.disarmed++;
    },
  };
  return { w, watch };
}

function setup(opts: { maxSleepMs?: number; registerFails?: boolean; heldWatch?: HeldWatch; ownLockMs?: number } = {}) {
  const state = {
    listening: true,
    paused: 0,
    resumed: 0,
    hurried: 0,
    registered: [] as string[][],
    removed: 0,
    waits: [] as number[],
  };
  // Each BLPOP waits its timeout unless `poke` or `fail` settles it first.
  let settle: ((v: { result: unknown } | Error) => void) | null = null;
  const fakeFetch = (async (_url: string, init: RequestInit) => {
    const [, , timeoutS] = JSON.parse(String(init.body)) as [string, string, string];
    state.waits.push(Number(timeoutS));
    const outcome = await new Promise<{ result: unknown } | Error>((resolve) => {
      settle = resolve;
      const t = setTimeout(() => resolve({ result: null }), Number(timeoutS) * 1000);
      init.signal?.addEventListener("abort", () => {
        clearTimeout(t);
        resolve(new Error("aborted"));
      });
    });
    if (outcome instanceof Error) throw outcome;
    return new Response(JSON.stringify(outcome), { status: 200 });
  }) as typeof fetch;
  let score: number | null = null;
  const redis = {
    eval: async (script: string, keys: string[], args: string[]) => {
      if (script === UNREGISTER_SLEEPER) {
        // Compare-and-delete: only the registration with this very score goes.
        if (score === null || Number(args[0]) !== score) return 0;
        score = null;
        state.removed++;
        return 1;
      }
      if (opts.registerFails) throw new Error("redis down");
      state.registered.push([...keys, ...args]);
      score = Number(args[0]);
      return 1;
    },
  } as unknown as Redis;
  const activity = new FleetActivity({
    idleMs: 60_000,
    localRuns: () => 0,
    listening: () => state.listening,
    watchesHeld: () => opts.heldWatch !== undefined,
    ownLockMs: opts.ownLockMs,
  });
  activity.onWork(() => state.hurried++);
  const s = new FleetSleep({
    hostId: "h1",
    activity,
    redis,
    keys: redisKeys(),
    rest: { url: "http://redis.invalid", token: "t" },
    listener: {
      pause: () => {
        state.paused++;
      },
      resume: () => {
        state.resumed++;
      },
    },
    maxSleepMs: opts.maxSleepMs ?? 60_000,
    wakePollMs: 200,
    log: silentLogger,
    fetch: fakeFetch,
    heldWatch: opts.heldWatch,
  });
  s.start();
  const quietLook = async (nextDueInMs: number | null, running = false) => {
    await sleep(2);
    activity.looked({ ...NONE, running, nextDueInMs }, activity.lookStarting());
    await sleep(5);
  };
  return {
    s,
    activity,
    state,
    quietLook,
    poke: () => settle?.({ result: ["ear:wake:h1", "1"] }),
    fail: () => settle?.(new Error("connection reset")),
  };
}

describe("FleetSleep", () => {
  it("sleeps after a quiet look: registered until the deadline, LISTEN paused, idle without LISTEN", async () => {
    const { s, activity, state, quietLook } = setup();
    await quietLook(30_000);
    expect(s.asleep).toBe(true);
    expect(activity.asleep).toBe(true);
    expect(state.paused).toBe(1);
    // Not a held sleeper: the cron's backstops may skip while it sleeps.
    expect(state.registered[0]?.slice(0, 3)).toEqual(["ear:sleepers", "ear:wake:h1", "ear:sleepers:held"]);
    expect(state.registered[0]?.slice(4)).toEqual(["h1", "0"]);
    const until = Number(state.registered[0]?.[3]);
    expect(until).toBeGreaterThan(Date.now() + 29_000);
    expect(until).toBeLessThan(Date.now() + 40_000);
    // A suspend closed LISTEN: still idle, nothing is news.
    state.listening = false;
    expect(activity.idle).toBe(true);
    // Each wait is one wake-poll period (0.2 s here).
    await sleep(450);
    expect(state.waits.length).toBeGreaterThanOrEqual(2);
    expect(state.waits.every((w) => w <= 0.2)).toBe(true);
    await s.stop();
  });

  it("wakes at once on a poke: loops hurried, LISTEN resumed, the registration left to the poker", async () => {
    const { s, activity, state, quietLook, poke } = setup();
    await quietLook(null);
    expect(s.asleep).toBe(true);
    const hurried = state.hurried;
    poke();
    await sleep(5);
    expect(s.asleep).toBe(false);
    expect(activity.asleep).toBe(false);
    expect(activity.idle).toBe(false);
    expect(state.hurried).toBe(hurried + 1);
    expect(state.resumed).toBe(1);
    expect(state.removed).toBe(0);
    await s.stop();
  });

  it("wakes at its deadline, and when the wait fails, unregistering itself", async () => {
    const a = setup();
    await a.quietLook(2_100);
    expect(a.s.asleep).toBe(true);
    await sleep(2_400);
    expect(a.s.asleep).toBe(false);
    expect(a.state.removed).toBe(1);
    await a.s.stop();

    const b = setup();
    await b.quietLook(null);
    b.fail();
    await sleep(5);
    expect(b.s.asleep).toBe(false);
    expect(b.state.resumed).toBe(1);
    expect(b.state.removed).toBe(1);
    await b.s.stop();
  });

  it("wakes on news (a NOTIFY while LISTEN lasts) and does not sleep when Redis cannot register it or the deadline is near", async () => {
    const a = setup();
    await a.quietLook(null);
    a.activity.noteWork();
    await sleep(5);
    expect(a.s.asleep).toBe(false);
    expect(a.state.resumed).toBe(1);
    await a.s.stop();

    const b = setup({ registerFails: true });
    await b.quietLook(null);
    expect(b.s.asleep).toBe(false);
    expect(b.state.paused).toBe(0);
    // Still idle on the look, as before sleep existed.
    expect(b.activity.idle).toBe(true);
    await b.s.stop();

    const c = setup();
    await c.quietLook(500);
    expect(c.s.asleep).toBe(false);
    await c.s.stop();
  });

  it("sleeps over runs held elsewhere only with their owners watched, and wakes when the last owner's session ends", async () => {
    // No watch on this host: a running job anywhere is work, as before.
    const a = setup();
    await a.quietLook(null, true);
    expect(a.s.asleep).toBe(false);
    expect(a.activity.idle).toBe(false);
    expect(a.state.registered).toEqual([]);
    await a.s.stop();

    // Watched, with an owner holding the lock: asleep, registered as a held sleeper (the cron keeps its backstops).
    const held = fakeHeldWatch(true);
    const b = setup({ heldWatch: held.watch });
    await b.quietLook(null, true);
    expect(b.s.asleep).toBe(true);
    expect(held.w.armed).toBe(1);
    expect(b.state.registered[0]?.slice(4)).toEqual(["h1", "1"]);
    const hurried = b.state.hurried;
    // The owner's session ended: awake at once, busy (the reaper's cadence finds the silent run), unregistered.
    held.w.release();
    await sleep(5);
    expect(b.s.asleep).toBe(false);
    expect(b.activity.idle).toBe(false);
    expect(b.state.hurried).toBe(hurried + 1);
    expect(b.state.removed).toBe(1);
    expect(held.w.disarmed).toBeGreaterThanOrEqual(1);
    await b.s.stop();

    // Watched, but no owner holds the lock (an older build, or not yet connected): no sleep, busy.
    const free = fakeHeldWatch(false);
    const c = setup({ heldWatch: free.watch });
    await c.quietLook(null, true);
    expect(free.w.armed).toBe(1);
    expect(c.s.asleep).toBe(false);
    expect(c.activity.idle).toBe(false);
    expect(c.state.registered).toEqual([]);
    await c.s.stop();

    // This host's own run ended within the lost bound: its heartbeat session may hold the lock
    // still, and a watch would wait on it. Busy until that has passed, then asleep.
    const own = fakeHeldWatch(true);
    const d = setup({ heldWatch: own.watch, ownLockMs: 150 });
    d.activity.localRunEnded();
    await d.quietLook(null, true);
    expect(own.w.armed).toBe(0);
    expect(d.s.asleep).toBe(false);
    expect(d.activity.idle).toBe(false);
    await sleep(200);
    await d.quietLook(null, true);
    expect(own.w.armed).toBe(1);
    expect(d.s.asleep).toBe(true);
    await d.s.stop();
  });
});
