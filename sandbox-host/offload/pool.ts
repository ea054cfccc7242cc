/**
 * The one bounded adapter for blocking or CPU-heavy work on a sandbox-host (a blocked event loop
 * misses the heartbeats and lease renewals of every run on the host): a small pool of worker
 * threads, each running one named task from tasks.ts at a time, and
 * a bounded queue in front of them (full → `OffloadQueueFullError`, never an unbounded backlog).
 *
 * The rule that makes the bound true: a slot is freed only when its worker reports the task
 * really finished (or the thread is gone). A caller's AbortSignal stops the caller waiting; it
 * never frees the slot, because the function is still running on that thread and admitting
 * another task would put size+1 heavy tasks on a pool sized for `size`. A task aborted while
 * still queued never started, so it is simply removed. A caller's `timeoutMs` is the one way to
 * end a started task early: its thread is terminated, and the slot is freed when it is gone.
 *
 * Shutdown is `drain()` (stop admission, let admitted work finish) then `close()` (terminate the
 * threads).
 *
 * The same pool runs the hosts' code tools (code-tools/code-tool-pool.ts) from another worker
 * entry (`entry`), with memory limits per thread (`resourceLimits`) and a cancel that reaches the
 * task (`cancelGraceMs`: the worker is told, and its thread is terminated if the task has not
 * returned within the grace).
 */
import { performance } from "node:perf_hooks";
import { type ResourceLimits, Worker } from "node:worker_threads";
import {
  OffloadAbortedError,
  OffloadClosedError,
  OffloadError,
  OffloadQueueFullError,
  OffloadTaskError,
  OffloadTimeoutError,
} from "./offload-errors";
import type * as Tasks from "./tasks";
import type { TaskReply, TaskRequest } from "./worker";

type TaskTable = typeof Tasks;
// biome-ignore lint/suspicious/noExplicitAny: a task table's functions take any arguments
export type TaskTableShape = Record<string, (...args: any[]) => unknown>;
export type OffloadTaskName<T extends TaskTableShape = TaskTable> = keyof T & string;
export type OffloadTaskArgs<K extends keyof T, T extends TaskTableShape = TaskTable> = Parameters<T[K]>;
export type OffloadTaskResult<K extends keyof T, T extends TaskTableShape = TaskTable> = Awaited<ReturnType<T[K]>>;

export type OffloadOutcome = "ok" | "error" | "worker_died" | "timeout";

/** What the pool reports; the host's prom-client metrics implement it (metrics/metrics.ts). */
export interface OffloadObserver {
  inFlight(n: number): void;
  queued(n: number): void;
  rejected(reason: "queue_full" | "closed"): void;
  /** Observed when the worker really finished, whether or not the caller still waited. */
  finished(task: string, outcome: OffloadOutcome, seconds: number): void;
}

export interface OffloadPoolOptions {
  /**
   * Worker threads, i.e. tasks running at once. Default 2 (a host has few cores to spare).
   * Threads start on first demand (or `warm()`): each costs ~10 MB and, under tsx, a few
   * hundred ms of its own CPU to load, which a host that never offloads should not pay.
   */
  size?: number;
  /** Tasks allowed to wait for a thread; one more is rejected. Default 64. */
  maxQueue?: number;
  observer?: OffloadObserver;
  /** The worker entry (`workerEntry`); default: the tasks of tasks.ts (worker.ts). */
  entry?: URL;
  /** Handed to every thread (`workerData`), e.g. the tool modules it loads. */
  workerData?: unknown;
  /** Per-thread memory limits: a task past them ends its thread (`worker_died`, remoteName ERR_WORKER_OUT_OF_MEMORY). */
  resourceLimits?: ResourceLimits;
  /** The thread's name in diagnostics. */
  name?: string;
  /** Messages a worker sends besides its replies (a tool's log lines). */
  onMessage?: (message: unknown) => void;
}

export interface RunOptions {
  /** Stops the caller waiting. A started task keeps its slot until the worker is done. */
  signal?: AbortSignal;
  /** ArrayBuffers to move (not copy) to the worker. */
  transfer?: ArrayBuffer[];
  /**
   * Run-time bound, counted from the task's start on a thread (not its wait in the queue): past
   * it the thread is terminated and the caller gets `OffloadTimeoutError`. For work whose cost
   * the input decides (a tenant's regex), where no abort could reach a loop that never yields.
   */
  timeoutMs?: number;
  /**
   * When set, an abort of a started task is sent to its worker (`{cancel: id}`, the task's own
   * AbortSignal), and the thread is terminated if the task has not returned this long after; the
   * slot is freed when it returned or the thread is gone. Unset: the task runs to its end.
   */
  cancelGraceMs?: number;
}

export interface OffloadStats {
  size: number;
  /** Threads started so far (≤ size). */
  threads: number;
  inFlight: number;
  queued: number;
  rejected: number;
  completed: number;
  closing: boolean;
}

interface Job {
  id: number;
  task: string;
  args: unknown[];
  transfer: ArrayBuffer[];
  resolve(value: unknown): void;
  reject(err: unknown): void;
  /** The caller stopped waiting (aborted); the work, once started, still runs to the end. */
  callerGone: boolean;
  startedAt: number;
  timeoutMs: number | undefined;
  timer: NodeJS.Timeout | undefined;
  /** Its bound passed and its thread is being terminated. */
  timedOut: boolean;
  cancelGraceMs: number | undefined;
  detach(): void;
}

interface Slot {
  worker: Worker;
  job: Job | null;
  exitError: Error | null;
  /** The worker loaded its tasks; an exit before that is a broken start, not a task's crash. */
  ready: boolean;
  /** Settles when the worker is ready or gone. */
  loaded: Promise<void>;
  /** Being terminated (a task's bound passed): it takes no more work, its exit frees the slot. */
  retiring: boolean;
  markLoaded(): void;
}

const noopObserver: OffloadObserver = { inFlight() {}, queued() {}, rejected() {}, finished() {} };

export class OffloadPool<T extends TaskTableShape = TaskTable> {
  private readonly slots: Slot[] = [];
  private readonly queue: Job[] = [];
  private readonly observer: OffloadObserver;
  private readonly maxQueue: number;
  private readonly size: number;
  private nextId = 1;
  private closing = false;
  private terminated = false;
  /** Set when a worker could not even start: respawning would only loop. */
  private broken: OffloadError | null = null;
  private rejectedCount = 0;
  private completedCount = 0;
  private idleWaiters: Array<() => void> = [];
  private readonly entry: URL;
  private readonly workerOptions: Pick<OffloadPoolOptions, "workerData" | "resourceLimits" | "name" | "onMessage">;

  constructor(opts: OffloadPoolOptions = {}) {
    this.size = opts.size ?? 2;
    if (!Number.isInteger(this.size) || this.size < 1)
      throw new RangeError(`offload pool size must be ≥ 1, got ${this.size}`);
    this.maxQueue = opts.maxQueue ?? 64;
    if (!Number.isInteger(this.maxQueue) || this.maxQueue < 0) throw new RangeError("maxQueue must be ≥ 0");
    this.observer = opts.observer ?? noopObserver;
    this.entry = opts.entry ?? WORKER_ENTRY;
    this.workerOptions = {
      workerData: opts.workerData,
      resourceLimits: opts.resourceLimits,
      name: opts.name ?? "offload",
      onMessage: opts.onMessage,
    };
    this.report();
  }

  /** Start every thread now and wait until each has loaded its tasks. */
  async warm(): Promise<void> {
    while (this.slots.length < this.size) this.spawn();
    await Promise.all(this.slots.map((s) => s.loaded));
    if (this.broken) throw this.broken;
  }

  /** Run `task(...args)` on a worker thread. Rejects with a typed `OffloadError`. */
  run<K extends OffloadTaskName<T>>(
    task: K,
    args: OffloadTaskArgs<K, T>,
    opts: RunOptions = {},
  ): Promise<OffloadTaskResult<K, T>> {
    if (this.closing) {
      this.reject("closed");
      return Promise.reject(new OffloadClosedError());
    }
    if (this.broken) return Promise.reject(this.broken);
    const { signal } = opts;
    if (signal?.aborted) return Promise.reject(new OffloadAbortedError(false, signal.reason));
    const idle = this.idleSlot();
    if (!idle && this.queue.length >= this.maxQueue) {
      this.reject("queue_full");
      return Promise.reject(new OffloadQueueFullError(this.maxQueue));
    }
    return new Promise<OffloadTaskResult<K, T>>((resolve, reject) => {
      const job: Job = {
        id: this.nextId++,
        task,
        args,
        transfer: opts.transfer ?? [],
        resolve: resolve as (v: unknown) => void,
        reject,
        callerGone: false,
        startedAt: 0,
        timeoutMs: opts.timeoutMs,
        timer: undefined,
        timedOut: false,
        cancelGraceMs: opts.cancelGraceMs,
        detach: () => signal?.removeEventListener("abort", onAbort),
      };
      const onAbort = () => {
        job.detach();
        const queuedAt = this.queue.indexOf(job);
        if (queuedAt >= 0) {
          this.queue.splice(queuedAt, 1);
          this.report();
          this.checkIdle();
          reject(new OffloadAbortedError(false, signal?.reason));
          return;
        }
        // Running: the caller leaves, the slot stays held until the worker says done.
        job.callerGone = true;
        if (job.cancelGraceMs !== undefined) this.cancelRunning(job, job.cancelGraceMs);
        reject(new OffloadAbortedError(true, signal?.reason));
      };
      signal?.addEventListener("abort", onAbort, { once: true });
      if (idle) this.dispatch(idle, job);
      else this.queue.push(job);
      this.report();
    });
  }

  /** Stop admitting work and wait until every admitted task (queued or running) has finished. */
  drain(): Promise<void> {
    this.closing = true;
    if (this.isIdle()) return Promise.resolve();
    return new Promise((resolve) => this.idleWaiters.push(resolve));
  }

  /**
   * Drain, then terminate the threads. With `timeoutMs`, work still running after it is ended
   * by terminating its thread (its caller gets `worker_died`): the slot is only gone with it.
   */
  async close(opts: { timeoutMs?: number } = {}): Promise<void> {
    const drained = this.drain();
    if (opts.timeoutMs === undefined) await drained;
    else {
      let timer: NodeJS.Timeout | undefined;
      await Promise.race([drained, new Promise((r) => (timer = setTimeout(r, opts.timeoutMs)))]);
      clearTimeout(timer);
    }
    this.terminated = true;
    for (const job of this.queue.splice(0)) {
      job.detach();
      if (!job.callerGone) job.reject(new OffloadClosedError());
    }
    await Promise.all(this.slots.map((s) => s.worker.terminate()));
    this.report();
  }

  stats(): OffloadStats {
    return {
      size: this.size,
      threads: this.slots.length,
      inFlight: this.slots.filter((s) => s.job !== null).length,
      queued: this.queue.length,
      rejected: this.rejectedCount,
      completed: this.completedCount,
      closing: this.closing,
    };
  }

  private idleSlot(): Slot | undefined {
    return (
      this.slots.find((s) => s.job === null && !s.retiring) ??
      (this.slots.length < this.size ? this.spawn() : undefined)
    );
  }

  /** Tell the task's worker to abort it; end the thread if the task is still running after `graceMs`. */
  private cancelRunning(job: Job, graceMs: number): void {
    const slot = this.slots.find((s) => s.job === job);
    if (!slot) return;
    slot.worker.postMessage({ cancel: job.id });
    clearTimeout(job.timer);
    job.timer = setTimeout(() => {
      if (slot.job !== job) return;
      slot.retiring = true;
      // As for a timeout: the exit (onExit) frees the slot, the work is over only then.
      void slot.worker.terminate();
    }, graceMs);
  }

  private spawn(): Slot {
    const { workerData, resourceLimits, name, onMessage } = this.workerOptions;
    const worker = new Worker(this.entry, { name, workerData, resourceLimits });
    worker.unref();
    let markLoaded = () => {};
    const loaded = new Promise<void>((r) => (markLoaded = r));
    const slot: Slot = { worker, job: null, exitError: null, ready: false, loaded, markLoaded, retiring: false };
    this.slots.push(slot);
    worker.on("message", (reply: TaskReply | { log: unknown }) => {
      if ("log" in reply) onMessage?.(reply.log);
      else this.onReply(slot, reply);
    });
    worker.on("error", (err) => {
      slot.exitError = err;
    });
    worker.on("exit", (code) => this.onExit(slot, code));
    return slot;
  }

  private dispatch(slot: Slot, job: Job): void {
    slot.job = job;
    job.startedAt = performance.now();
    // A busy worker keeps the process alive; an idle one does not.
    slot.worker.ref();
    const req: TaskRequest = { id: job.id, task: job.task, args: job.args };
    try {
      slot.worker.postMessage(req, job.transfer);
      if (job.timeoutMs !== undefined) {
        const ms = job.timeoutMs;
        const arm = () => {
          if (slot.job !== job) return;
          job.timer = setTimeout(() => {
            job.timedOut = true;
            slot.retiring = true;
            // The exit (onExit) settles the caller and frees the slot: the work is over only then.
            void slot.worker.terminate();
          }, ms);
        };
        // Counted from a loaded thread: a fresh one's start (seconds under tsx on a loaded box)
        // is not the task's time, and ending a thread mid-start would mark the pool broken.
        if (slot.ready) arm();
        else void slot.loaded.then(arm);
      }
    } catch (err) {
      // Not cloneable: nothing reached the worker, so nothing runs and the slot is free again.
      slot.job = null;
      slot.worker.unref();
      job.detach();
      job.reject(new OffloadError("task_failed", `cannot send task ${job.task} to a worker`, { cause: err }));
      this.next(slot);
    }
  }

  private onReply(slot: Slot, reply: TaskReply): void {
    if ("ready" in reply) {
      slot.ready = true;
      slot.markLoaded();
      return;
    }
    const job = slot.job;
    if (!job || job.id !== reply.id) return;
    // Settle the caller first, so a drain() that this completes resolves after it.
    if (!job.callerGone) {
      if (reply.ok) job.resolve(reply.value);
      else job.reject(new OffloadTaskError("task_failed", job.task, reply.message, reply.name));
    }
    this.finish(slot, job, reply.ok ? "ok" : "error");
  }

  private onExit(slot: Slot, code: number): void {
    // The thread is gone, so whatever it ran really ended: its slot is free with it.
    this.slots.splice(this.slots.indexOf(slot), 1);
    slot.markLoaded();
    const job = slot.job;
    if (job) {
      this.finish(slot, job, job.timedOut ? "timeout" : "worker_died", false);
      if (!job.callerGone) {
        const why = slot.exitError?.message ?? `worker thread exited with code ${code}`;
        const errCode = (slot.exitError as { code?: unknown } | null)?.code;
        job.reject(
          job.timedOut
            ? new OffloadTimeoutError(job.task, job.timeoutMs ?? 0)
            : new OffloadTaskError("worker_died", job.task, why, typeof errCode === "string" ? errCode : undefined),
        );
      }
    }
    if (this.terminated) return;
    if (!slot.ready) {
      // It never loaded its tasks: starting another would fail the same way, in a loop.
      this.broken = new OffloadTaskError(
        "worker_died",
        "(startup)",
        `offload worker failed to start: ${slot.exitError?.message ?? `exit code ${code}`}`,
      );
      for (const queued of this.queue.splice(0)) {
        queued.detach();
        queued.reject(this.broken);
      }
    } else if (this.queue.length > 0) {
      this.next(this.spawn());
      return;
    }
    this.report();
    this.checkIdle();
  }

  private finish(slot: Slot, job: Job, outcome: OffloadOutcome, startNext = true): void {
    job.detach();
    clearTimeout(job.timer);
    slot.job = null;
    slot.worker.unref();
    this.completedCount++;
    this.observer.finished(job.task, outcome, (performance.now() - job.startedAt) / 1000);
    // A retiring thread (its task answered just as its bound passed) is left to exit; onExit
    // starts a fresh one for the queue.
    if (startNext && !slot.retiring) this.next(slot);
  }

  private next(slot: Slot): void {
    const job = this.terminated ? undefined : this.queue.shift();
    if (job) this.dispatch(slot, job);
    this.report();
    this.checkIdle();
  }

  private reject(reason: "queue_full" | "closed"): void {
    this.rejectedCount++;
    this.observer.rejected(reason);
  }

  private report(): void {
    const s = this.stats();
    this.observer.inFlight(s.inFlight);
    this.observer.queued(s.queued);
  }

  private isIdle(): boolean {
    return this.queue.length === 0 && this.slots.every((s) => s.job === null);
  }

  private checkIdle(): void {
    if (!this.isIdle()) return;
    for (const resolve of this.idleWaiters.splice(0)) resolve();
  }
}

// Source runs under tsx (`node --import tsx`). On Node 20 a worker thread does not get a .ts
// entry loaded through an inherited `--import tsx` (measured: "Unknown file extension .ts",
// with the flag inherited or passed in execArgv), so the thread starts from a tiny ESM
// bootstrap that registers tsx in that thread and then imports worker.ts. A build to .js
// starts worker.js directly.
const SELF_IS_TS = /\.[cm]?ts$/.test(new URL(import.meta.url).pathname);

/**
 * A worker entry: the .ts module (through the bootstrap) when running from source, else its
 * built file beside the host's bundle (tools/build/host.ts writes `<builtName>` there).
 */
export function workerEntry(tsModule: URL, builtName: string): URL {
  return SELF_IS_TS
    ? new URL(
        `data:text/javascript,${encodeURIComponent(
          `import { register } from ${JSON.stringify(tsxApiUrl())}; register(); ` +
            `await import(${JSON.stringify(tsModule.href)});`,
        )}`,
      )
    : new URL(`./${builtName}`, import.meta.url);
}

const WORKER_ENTRY: URL = workerEntry(new URL("./worker.ts", import.meta.url), "worker.js");

function tsxApiUrl(): string {
  return import.meta.resolve("tsx/esm/api");
}
