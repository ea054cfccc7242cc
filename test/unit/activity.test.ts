/**
 * When a host calls the fleet idle (sandbox-host/lifecycle/activity.ts): only after a look that
 * found nothing, with no run here and LISTEN up; never on a look that raced an announcement; and
 * any news ends idleness at once, telling the loops to hurry.
 */
import { describe, expect, it } from "vitest";
import { BUSY_LOOK_GAP_MS, FleetActivity } from "../../sandbox-host/lifecycle/activity";
import { MAX_WATCHED_OWNERS } from "../../sandbox-host/lifecycle/held-watch";
import { sleep } from "../../src/domain/async";

const NONE = { waiting: false, claimed: false, running: false };

function activity(over: { idleMs?: number } = {}) {
  const state = { runs: 0, listening: true, hurried: 0 };
  const a = new FleetActivity({
    idleMs: over.idleMs ?? 60_000,
    localRuns: () => state.runs,
    listening: () => state.listening,
  });
  a.onWork(() => state.hurried++);
  return { a, state };
}

describe("FleetActivity", () => {
  it("is busy from start until a look finds nothing anywhere", async () => {
    const { a } = activity();
    expect(a.idle).toBe(false);
    expect(a.shouldLook()).toBe(true);
    await sleep(2);
    a.looked({ ...NONE, running: true }, a.lookStarting());
    expect(a.idle).toBe(false);
    a.looked({ ...NONE, waiting: true }, a.lookStarting());
    expect(a.idle).toBe(false);
    // (Work found counts as news at that instant: the next look must start after it.)
    await sleep(2);
    a.looked(NONE, a.lookStarting());
    expect(a.idle).toBe(true);
  });

  it("stays busy when news arrived while the look's statement ran", async () => {
    const { a } = activity();
    await sleep(2);
    const started = a.lookStarting();
    a.noteWork(); // an announcement between the statement's snapshot and its answer
    a.looked(NONE, started);
    expect(a.idle).toBe(false);
  });

  it("news ends idleness and hurries the loops once; runs here or LISTEN down mean busy", async () => {
    const { a, state } = activity();
    await sleep(2);
    a.looked(NONE, a.lookStarting());
    expect(a.idle).toBe(true);
    a.noteWork();
    a.noteWork();
    expect(a.idle).toBe(false);
    expect(state.hurried).toBe(1);

    await sleep(2);
    a.looked(NONE, a.lookStarting());
    state.runs = 1;
    expect(a.idle).toBe(false);
    expect(a.shouldLook()).toBe(false);
    state.runs = 0;
    state.listening = false;
    expect(a.idle).toBe(false);
    expect(a.shouldLook()).toBe(false);
  });

  it("a host without runs in a busy fleet looks every BUSY_LOOK_GAP_MS, and at once when its last run ends", async () => {
    const { a, state } = activity();
    a.looked({ ...NONE, running: true }, a.lookStarting());
    expect(a.shouldLook(Date.now() + 1)).toBe(false);
    expect(a.shouldLook(Date.now() + BUSY_LOOK_GAP_MS)).toBe(true);
    await sleep(2);
    state.runs = 0;
    a.localRunEnded();
    expect(a.shouldLook()).toBe(true);
  });

  it("HOST_IDLE_MS = 0: never looks, never idle", () => {
    const { a } = activity({ idleMs: 0 });
    expect(a.shouldLook()).toBe(false);
    expect(a.idle).toBe(false);
  });

  it("a host whose own runs are the fleet's only work goes idle with them, and never sleeps for it", async () => {
    const { a, state } = activity();
    let quietCalls = 0;
    a.onQuiet(() => quietCalls++);
    state.runs = 1;
    // Busy with runs: no look until BUSY_LOOK_GAP_MS passed without news (a claim, an announcement).
    expect(a.shouldLook()).toBe(false);
    expect(a.shouldLook(Date.now() + BUSY_LOOK_GAP_MS / 2)).toBe(false);
    expect(a.shouldLook(Date.now() + BUSY_LOOK_GAP_MS + 5)).toBe(true);
    await sleep(20);
    a.noteWork();
    expect(a.shouldLook(Date.now() + BUSY_LOOK_GAP_MS / 2)).toBe(false);
    // Runs elsewhere too, or not asked: busy (each owner's reaper watches the others).
    await sleep(2);
    a.looked({ ...NONE, running: true, runningElsewhere: true }, a.lookStarting());
    expect(a.idle).toBe(false);
    await sleep(2);
    a.looked({ ...NONE, running: true }, a.lookStarting());
    expect(a.idle).toBe(false);
    // Only its own: idle (its loops slow down), but the sleep is not told.
    await sleep(2);
    a.looked({ ...NONE, running: true, runningElsewhere: false }, a.lookStarting());
    expect(a.idle).toBe(true);
    expect(quietCalls).toBe(0);
    // A deadline coming (a run's timeout, a wait's): busy.
    await sleep(2);
    a.looked({ ...NONE, running: true, runningElsewhere: false, expiring: true }, a.lookStarting());
    expect(a.idle).toBe(false);
    await sleep(2);
    a.looked({ ...NONE, running: true, runningElsewhere: false }, a.lookStarting());
    expect(a.idle).toBe(true);
    // One of its runs ending is news (it may leave work nothing announces).
    const hurried = state.hurried;
    a.localRunEnded();
    expect(a.idle).toBe(false);
    expect(state.hurried).toBe(hurried + 1);
    // Quiet with no runs here, then a claim: the claim's noteWork ends it; without one, runs here
    // after a look that saw none are not idle.
    state.runs = 0;
    await sleep(2);
    a.looked(NONE, a.lookStarting());
    expect(a.idle).toBe(true);
    expect(quietCalls).toBe(1);
    state.runs = 1;
    expect(a.idle).toBe(false);
  });

  it("an owner with runs elsewhere too is quiet only once each other owner is watched, and busy again when one is gone", async () => {
    const state = { runs: 1, watchOk: true, size: 0, cleared: 0, asked: [] as string[][], duringWatch: () => {} };
    const a = new FleetActivity({
      idleMs: 60_000,
      localRuns: () => state.runs,
      listening: () => true,
      ownersWatch: {
        async watch(owners) {
          state.asked.push([...owners]);
          await sleep(1);
          state.duringWatch();
          state.size = state.watchOk ? owners.length : 0;
          return state.watchOk;
        },
        clear() {
          state.cleared++;
          state.size = 0;
        },
        get size() {
          return state.size;
        },
      },
    });
    const elsewhere = (owners: string[]) => ({
      ...NONE,
      running: true,
      runningElsewhere: true,
      ownersElsewhere: owners,
    });
    await sleep(2);
    await a.looked(elsewhere(["b", "c"]), a.lookStarting());
    expect([a.idle, a.ownersWatched, state.asked]).toEqual([true, true, [["b", "c"]]]);
    // An owner gone (the watch's release notes work): busy, and the watches go.
    a.noteWork();
    expect([a.idle, a.ownersWatched, state.cleared]).toEqual([false, false, 1]);
    // A watch that cannot be armed (an owner holding no lock of its own): busy.
    state.watchOk = false;
    await sleep(2);
    await a.looked(elsewhere(["b"]), a.lookStarting());
    expect(a.idle).toBe(false);
    // More owners than MAX_WATCHED_OWNERS (the look lists one more to tell): busy, none watched.
    state.watchOk = true;
    const asked = state.asked.length;
    await sleep(2);
    await a.looked(elsewhere(Array.from({ length: MAX_WATCHED_OWNERS + 1 }, (_, i) => `h${i}`)), a.lookStarting());
    expect([a.idle, state.asked.length]).toEqual([false, asked]);
    // News while the watches were being armed (a claim, say): not quiet, and they go.
    state.duringWatch = () => a.noteWork();
    const cleared = state.cleared;
    await sleep(2);
    await a.looked(elsewhere(["b"]), a.lookStarting());
    expect([a.idle, state.cleared, state.size]).toEqual([false, cleared + 1, 0]);
    state.duringWatch = () => {};
    // Its own runs only, after being quiet with watches: the watches go.
    await sleep(2);
    await a.looked(elsewhere(["b"]), a.lookStarting());
    expect(a.ownersWatched).toBe(true);
    await sleep(2);
    await a.looked({ ...NONE, running: true, runningElsewhere: false, ownersElsewhere: [] }, a.lookStarting());
    expect([a.idle, a.ownersWatched, state.size]).toEqual([true, false, 0]);
  });
});
