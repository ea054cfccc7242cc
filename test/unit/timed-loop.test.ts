/**
 * The loop the schedule ticker and the webhook sender sleep in (sandbox-host/lifecycle/timed-loop.ts):
 * it sleeps what its run says, capped by the busy or idle period, and a wake during a run is one
 * more run right after it, never a lost wake-up (a bug once stopped the loop for good).
 */
import { describe, expect, it } from "vitest";
import { TimedLoop } from "../../sandbox-host/lifecycle/timed-loop";
import { sleep } from "../../src/domain/async";

describe("TimedLoop", () => {
  it("a wake during a run makes one more run after it, and the loop keeps going", async () => {
    let runs = 0;
    let release: () => void = () => {};
    const loop = new TimedLoop({ name: "t", busyMs: 40 }, async () => {
      runs++;
      if (runs === 1) await new Promise<void>((r) => (release = r));
      return 40;
    });
    loop.start();
    await sleep(5);
    loop.wake();
    loop.wake();
    release();
    await sleep(10);
    expect(runs).toBe(2);
    // Then the timer still runs it (every 40 ms).
    await sleep(100);
    expect(runs).toBeGreaterThanOrEqual(4);
    await loop.stop();
    const after = runs;
    await sleep(100);
    expect(runs).toBe(after);
  });

  it("sleeps what the run returns, capped by the busy period, or the idle one while idle", async () => {
    const at: number[] = [];
    let idle = false;
    const loop = new TimedLoop({ name: "t", busyMs: 30, idle: { everyMs: 300, when: () => idle } }, async () => {
      at.push(Date.now());
      return 10_000;
    });
    loop.start();
    await sleep(150);
    const busyRuns = at.length;
    // Every ~30 ms (timers run late under load, never early): not the 10 s the run asked for.
    expect(busyRuns).toBeGreaterThanOrEqual(2);
    expect(busyRuns).toBeLessThanOrEqual(6);
    idle = true;
    await sleep(40);
    const idleFrom = at.length;
    await sleep(200);
    expect(at.length - idleFrom).toBe(0);
    loop.wake();
    await sleep(10);
    expect(at.length).toBe(idleFrom + 1);
    await loop.stop();
  });
});
