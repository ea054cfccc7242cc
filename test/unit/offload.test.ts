/**
 * The offload pool (sandbox-host/offload) with real worker threads: named tasks, typed errors,
 * the bounded queue, shutdown, and the rule that matters most — a caller giving up never frees
 * a slot while its work still runs on the thread.
 */
import { createHash } from "node:crypto";
import { promisify } from "node:util";
import { gunzip } from "node:zlib";
import { afterEach, describe, expect, it } from "vitest";
import {
  OffloadAbortedError,
  OffloadClosedError,
  OffloadQueueFullError,
  OffloadTaskError,
  OffloadTimeoutError,
} from "../../sandbox-host/offload/offload-errors";
import {
  type OffloadObserver,
  type OffloadOutcome,
  OffloadPool,
  type OffloadPoolOptions,
} from "../../sandbox-host/offload/pool";
import { sleep } from "../../src/domain/async";

const pools: OffloadPool[] = [];
afterEach(async () => {
  while (pools.length > 0) await pools.pop()!.close({ timeoutMs: 0 });
});

function recorder() {
  const finished: Array<{ task: string; outcome: OffloadOutcome; seconds: number }> = [];
  const rejected: string[] = [];
  let maxInFlight = 0;
  const observer: OffloadObserver = {
    inFlight: (n) => {
      maxInFlight = Math.max(maxInFlight, n);
    },
    queued: () => {},
    rejected: (reason) => rejected.push(reason),
    finished: (task, outcome, seconds) => finished.push({ task, outcome, seconds }),
  };
  return { observer, finished, rejected, maxInFlight: () => maxInFlight };
}

async function pool(opts: OffloadPoolOptions = {}): Promise<OffloadPool> {
  const p = new OffloadPool(opts);
  pools.push(p);
  await p.warm();
  return p;
}

describe("offload pool", () => {
  it("runs named tasks on worker threads and returns their results", async () => {
    const p = await pool();
    const data = Buffer.alloc(3 << 20, 7);
    expect(await p.run("hashLarge", [{ data }])).toBe(createHash("sha256").update(data).digest("hex"));
    const packed = await p.run("gzip", ["hello ".repeat(1000)]);
    expect((await promisify(gunzip)(packed)).toString()).toBe("hello ".repeat(1000));
    expect(await p.run("busyWork", [20])).toBeGreaterThanOrEqual(20);
    expect(p.stats()).toMatchObject({ size: 2, threads: 2, inFlight: 0, queued: 0 });
  }, 20_000);

  it("starts threads on demand, never more than its size", async () => {
    const rec = recorder();
    const p = new OffloadPool({ size: 2, observer: rec.observer });
    pools.push(p);
    expect(p.stats().threads).toBe(0);
    await Promise.all([1, 2, 3, 4, 5].map(() => p.run("busyWork", [30])));
    expect(p.stats().threads).toBe(2);
    expect(rec.maxInFlight()).toBe(2);
  }, 20_000);

  it("a task that throws rejects with task_failed; a dying thread with worker_died; the pool carries on", async () => {
    const rec = recorder();
    const p = await pool({ size: 1, observer: rec.observer });
    const thrown = await p.run("fail", ["boom"]).catch((e: unknown) => e);
    expect(thrown).toBeInstanceOf(OffloadTaskError);
    expect(thrown).toMatchObject({ code: "task_failed", remoteName: "TypeError" });
    expect((thrown as Error).message).toContain("boom");

    // A crash with a task queued behind it: the queued task runs on a replacement thread.
    const crash = p.run("crashWorker", [5]).catch((e: unknown) => e);
    const after = p.run("busyWork", [5]);
    expect(await crash).toMatchObject({ code: "worker_died" });
    expect(await after).toBeGreaterThanOrEqual(5);
    expect(rec.finished.map((f) => f.outcome)).toEqual(["error", "worker_died", "ok"]);
  }, 20_000);

  it("rejects with OffloadQueueFullError when every thread is busy and the queue is at its bound", async () => {
    const rec = recorder();
    const p = await pool({ size: 1, maxQueue: 1, observer: rec.observer });
    const running = p.run("busyWork", [300]);
    const queued = p.run("busyWork", [1]);
    await expect(p.run("busyWork", [1])).rejects.toBeInstanceOf(OffloadQueueFullError);
    expect(p.stats()).toMatchObject({ inFlight: 1, queued: 1, rejected: 1 });
    expect(rec.rejected).toEqual(["queue_full"]);
    await Promise.all([running, queued]);
    // Room again once the work really finished.
    expect(await p.run("busyWork", [1])).toBeGreaterThanOrEqual(1);
  }, 20_000);

  it("a caller's abort stops its wait, but the slot stays held until the worker really finishes", async () => {
    const rec = recorder();
    const p = await pool({ size: 1, observer: rec.observer });
    const WORK_MS = 500;
    const ac = new AbortController();
    const t0 = performance.now();
    const first = p.run("busyWork", [WORK_MS], { signal: ac.signal });
    await sleep(50);
    ac.abort(new Error("caller gave up"));
    const err = await first.catch((e: unknown) => e);
    const callerFreedAt = performance.now() - t0;
    expect(err).toBeInstanceOf(OffloadAbortedError);
    expect(err).toMatchObject({ code: "aborted", started: true });
    expect(callerFreedAt).toBeLessThan(WORK_MS / 2); // the caller did not wait for the work

    // The slot is still held: a second task must queue, not start.
    expect(p.stats()).toMatchObject({ inFlight: 1, queued: 0 });
    const second = p.run("busyWork", [1]).then(() => performance.now() - t0);
    expect(p.stats()).toMatchObject({ inFlight: 1, queued: 1 });
    const secondDoneAt = await second;
    // It ran only after the abandoned work ended on the thread.
    expect(secondDoneAt).toBeGreaterThanOrEqual(WORK_MS);
    expect(rec.maxInFlight()).toBe(1);
    expect(rec.finished[0]).toMatchObject({ task: "busyWork", outcome: "ok" });
    expect(rec.finished[0]!.seconds).toBeGreaterThanOrEqual(WORK_MS / 1000 - 0.01);
  }, 20_000);

  it("a task aborted while still queued is removed and never runs", async () => {
    const rec = recorder();
    const p = await pool({ size: 1, observer: rec.observer });
    const running = p.run("busyWork", [200]);
    const ac = new AbortController();
    const queued = p.run("busyWork", [1], { signal: ac.signal });
    expect(p.stats().queued).toBe(1);
    ac.abort();
    expect(await queued.catch((e: unknown) => e)).toMatchObject({ code: "aborted", started: false });
    expect(p.stats().queued).toBe(0);
    await running;
    await sleep(20);
    expect(rec.finished).toHaveLength(1);
    await expect(p.run("busyWork", [1], { signal: AbortSignal.abort() })).rejects.toMatchObject({ started: false });
  }, 20_000);

  it("drain stops admission, then waits for running and queued work; close ends the threads", async () => {
    const rec = recorder();
    const p = await pool({ size: 1, observer: rec.observer });
    const done: string[] = [];
    const a = p.run("busyWork", [150]).then(() => done.push("a"));
    const b = p.run("busyWork", [50]).then(() => done.push("b"));
    const drained = p.drain().then(() => done.push("drained"));
    await expect(p.run("busyWork", [1])).rejects.toBeInstanceOf(OffloadClosedError);
    expect(rec.rejected).toEqual(["closed"]);
    await Promise.all([a, b, drained]);
    expect(done).toEqual(["a", "b", "drained"]);
    await p.close();
    expect(p.stats().threads).toBe(0);
  }, 20_000);

  it("close with a timeout ends work that outlives it by terminating its thread", async () => {
    const p = await pool({ size: 1 });
    const long = p.run("busyWork", [10_000]).catch((e: unknown) => e);
    await sleep(50);
    const t0 = performance.now();
    await p.close({ timeoutMs: 100 });
    expect(performance.now() - t0).toBeLessThan(2000);
    expect(await long).toMatchObject({ code: "worker_died" });
  }, 20_000);

  it("a task past its timeoutMs has its thread ended: the caller gets timeout, the slot is free, the queue goes on", async () => {
    const rec = recorder();
    const p = await pool({ size: 1, observer: rec.observer });
    const t0 = performance.now();
    const runaway = p.run("busyWork", [60_000], { timeoutMs: 200 }).catch((e: unknown) => e);
    // Queued behind it: its bound counts from its own start, so it has the whole 1 s to run.
    const queued = p.run("busyWork", [50], { timeoutMs: 1000 });
    const err = await runaway;
    expect(err).toBeInstanceOf(OffloadTimeoutError);
    expect(err).toMatchObject({ code: "timeout", task: "busyWork", timeoutMs: 200 });
    expect(performance.now() - t0).toBeLessThan(3000);
    expect(await queued).toBeGreaterThanOrEqual(50);
    expect(await p.run("busyWork", [1], { timeoutMs: 1000 })).toBeGreaterThanOrEqual(1);
    expect(rec.finished.map((f) => f.outcome)).toEqual(["timeout", "ok", "ok"]);
    expect(p.stats()).toMatchObject({ threads: 1, inFlight: 0, queued: 0 });
  }, 20_000);

  it("counts timeoutMs from a loaded thread: a cold pool's start is not the task's time", async () => {
    const p = new OffloadPool({ size: 1 });
    pools.push(p);
    // A thread takes a few hundred ms to load under tsx; the task itself takes 5.
    expect(await p.run("busyWork", [5], { timeoutMs: 50 })).toBeGreaterThanOrEqual(5);
    expect(await p.run("busyWork", [5], { timeoutMs: 50 })).toBeGreaterThanOrEqual(5);
  }, 20_000);

  it("keeps the caller's event loop responsive while a task burns CPU", async () => {
    const p = await pool({ size: 1 });
    let worst = 0;
    let last = performance.now();
    const timer = setInterval(() => {
      const now = performance.now();
      worst = Math.max(worst, now - last - 10);
      last = now;
    }, 10);
    await p.run("busyWork", [600]);
    clearInterval(timer);
    expect(worst).toBeLessThan(150);
  }, 20_000);
});
