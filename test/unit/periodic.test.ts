/**
 * The one periodic-loop shape of the host (sandbox-host/lifecycle/periodic.ts): never two runs at
 * once, stop() resolves only after the run in flight, fixed rate keeps the period when a run is
 * slow, fixed delay adds the run's duration, and an extra run (runNow) waits for the scheduled one.
 * With an idle period: it waits that long while idle, and hurry() cuts the wait to a busy period.
 * A PeriodicService (the reaper, the upkeep duties, the janitor, the queue-depth sampler) takes
 * that idle period from the fleet's activity, and work appearing hurries it.
 */
import { describe, expect, it } from "vitest";
import { FleetActivity } from "../../sandbox-host/lifecycle/activity";
import { PeriodicService, PeriodicTask } from "../../sandbox-host/lifecycle/periodic";
import { sleep } from "../../src/domain/async";

describe("PeriodicTask", () => {
  it("never overlaps runs, and stop() waits for the one in flight", async () => {
    let running = 0;
    let maxRunning = 0;
    let finished = 0;
    // Stop while the third run is known to be in flight (a wall-clock wait could land between
    // two runs on a loaded machine: CI saw exactly that).
    let thirdStarted = () => {};
    const inThird = new Promise<void>((resolve) => {
      thirdStarted = resolve;
    });
    const task = new PeriodicTask({ name: "t", everyMs: 1, spread: 0, firstDelayMs: 0 }, async () => {
      running++;
      maxRunning = Math.max(maxRunning, running);
      if (finished === 2) thirdStarted();
      await sleep(20);
      running--;
      finished++;
    });
    task.start();
    await inThird;
    const stopping = task.stop();
    expect(running).toBe(1);
    await stopping;
    expect(running).toBe(0);
    const after = finished;
    await sleep(40);
    expect(finished).toBe(after);
    expect(maxRunning).toBe(1);
    expect(finished).toBeGreaterThanOrEqual(2);
  });

  it("fixed rate keeps the period when a run is slow; fixed delay adds the run's duration", async () => {
    const gaps = async (fixedRate: boolean) => {
      const starts: number[] = [];
      const task = new PeriodicTask({ name: "t", everyMs: 200, spread: 0, firstDelayMs: 0, fixedRate }, async () => {
        starts.push(performance.now());
        await sleep(150);
      });
      task.start();
      while (starts.length < 3) await sleep(10);
      await task.stop();
      return [starts[1]! - starts[0]!, starts[2]! - starts[1]!];
    };
    // A timer never fires early, so a fixed-delay gap is at least run (150) + period (200).
    for (const gap of await gaps(false)) expect(gap).toBeGreaterThanOrEqual(349);
    // Fixed rate: the period plus only the timer's own lateness, which may be large on a loaded
    // box; anything short of what a fixed delay must take tells the two apart.
    for (const gap of await gaps(true)) expect(gap).toBeLessThan(340);
  });

  it("runNow runs after the run in flight, never alongside it, and not at all once stopped", async () => {
    const log: string[] = [];
    const task = new PeriodicTask({ name: "t", everyMs: 10_000, spread: 0, firstDelayMs: 0 }, async () => {
      log.push("scheduled:start");
      await sleep(30);
      log.push("scheduled:end");
    });
    task.start();
    await sleep(5);
    await task.runNow(async () => {
      log.push("extra");
    });
    expect(log).toEqual(["scheduled:start", "scheduled:end", "extra"]);
    await task.stop();
    await task.runNow(async () => {
      log.push("after stop");
    });
    expect(log).not.toContain("after stop");
  });

  it("waits the idle period while idle, and hurry() brings the next run within one busy period", async () => {
    let idle = true;
    const starts: number[] = [];
    const task = new PeriodicTask(
      { name: "t", everyMs: 30, spread: 0, firstDelayMs: 0, idle: { everyMs: 60_000, when: () => idle } },
      async () => {
        starts.push(performance.now());
      },
    );
    task.start();
    await sleep(200);
    // The first run, then an idle wait of a minute: nothing more in 200 ms.
    expect(starts).toHaveLength(1);
    idle = false;
    const hurried = performance.now();
    task.hurry();
    while (starts.length < 3) await sleep(5);
    await task.stop();
    // One busy period after hurry(), then busy periods again (idle no longer holds).
    expect(starts[1]! - hurried).toBeLessThan(1000);
    expect(starts[2]! - starts[1]!).toBeLessThan(1000);
  });

  it("hurry() never brings a busy loop's next run forward", async () => {
    const starts: number[] = [];
    const task = new PeriodicTask({ name: "t", everyMs: 300, spread: 0, firstDelayMs: 0 }, async () => {
      starts.push(performance.now());
    });
    task.start();
    while (starts.length < 1) await sleep(5);
    for (let i = 0; i < 10; i++) task.hurry();
    while (starts.length < 2) await sleep(5);
    await task.stop();
    expect(starts[1]! - starts[0]!).toBeGreaterThanOrEqual(299);
  });

  it("a run that began busy is followed by a busy period even if the fleet went idle during it", async () => {
    let idle = false;
    const starts: number[] = [];
    const task = new PeriodicTask(
      { name: "t", everyMs: 30, spread: 0, firstDelayMs: 0, idle: { everyMs: 60_000, when: () => idle } },
      async () => {
        starts.push(performance.now());
        idle = true; // the fleet goes idle while this (busy) run is in flight
        await sleep(5);
      },
    );
    task.start();
    while (starts.length < 2) await sleep(5);
    await sleep(200);
    await task.stop();
    // The second run (began idle) is followed by the idle period: exactly two runs.
    expect(starts).toHaveLength(2);
    expect(starts[1]! - starts[0]!).toBeLessThan(1000);
  });
});

/** A fleet this host has looked at and found empty: idle from the start. */
function idleFleet(idleMs: number): FleetActivity {
  const activity = new FleetActivity({ idleMs, localRuns: () => 0, listening: () => true });
  activity.looked({ waiting: false, claimed: false, running: false }, Date.now() + 1);
  expect(activity.idle).toBe(true);
  return activity;
}

class Counting extends PeriodicService {
  readonly starts: number[] = [];
  constructor(everyMs: number, activity: FleetActivity, idleAtLeastBusy?: boolean) {
    super({ name: "counting", everyMs, spread: 0, firstDelayMs: 0, activity, idleAtLeastBusy }, async () => {
      this.starts.push(performance.now());
    });
  }
}

describe("PeriodicService", () => {
  it("while the fleet is idle it waits HOST_IDLE_MS, or at least its busy period with idleAtLeastBusy", async () => {
    const gap = async (idleAtLeastBusy: boolean) => {
      const service = new Counting(400, idleFleet(20), idleAtLeastBusy);
      service.start();
      while (service.starts.length < 2) await sleep(5);
      await service.stop();
      return service.starts[1]! - service.starts[0]!;
    };
    expect(await gap(false)).toBeLessThan(399);
    expect(await gap(true)).toBeGreaterThanOrEqual(399);
  });

  it("work appearing anywhere cuts an idle wait to one busy period", async () => {
    const activity = idleFleet(60_000);
    const service = new Counting(30, activity);
    service.start();
    await sleep(200);
    expect(service.starts).toHaveLength(1);
    const noted = performance.now();
    activity.noteWork();
    while (service.starts.length < 2) await sleep(5);
    await service.stop();
    expect(service.starts[1]! - noted).toBeLessThan(1000);
    expect(service.name).toBe("counting");
  });
});
