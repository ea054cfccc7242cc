/**
 * Run slots, heartbeats and shutdown for every run a host holds. A slot is taken the moment a
 * claim hits (so the claimer can never hold more than `maxRuns` claimed-or-running jobs) and is
 * freed when the run really ends. Heartbeats are one statement for all runs every ~2 s; a run
 * missing from its answer has lost ownership and is aborted without emitting anything further.
 */
import type { Db } from "../../src/db/client";
import { heartbeat } from "../../src/db/ownership-repo";
import { jitter } from "../../src/domain/backoff";
import { errorFields, type Logger } from "../log";
import type { HostMetrics } from "../metrics";
import type { ModelClient } from "../model/types";
import type { Outbox } from "../outbox";
import { ActiveRun, type Claim, type RunContext, runJob } from "./run-job";

export interface RunnerOptions {
  db: Db;
  hostId: string;
  maxRuns: number;
  model: ModelClient;
  outbox: Outbox;
  log: Logger;
  metrics: HostMetrics;
  heartbeatMs: number;
  coalesceMs?: number;
}

export class Runner {
  private readonly runs = new Map<string, { run: ActiveRun; done: Promise<void> }>();
  private readonly slotListeners = new Set<() => void>();
  private heartbeatTimer: NodeJS.Timeout | undefined;
  private heartbeatInFlight: Promise<void> | null = null;
  private readonly ctx: RunContext;

  constructor(private readonly opts: RunnerOptions) {
    this.ctx = {
      db: opts.db,
      hostId: opts.hostId,
      model: opts.model,
      outbox: opts.outbox,
      log: opts.log,
      coalesceMs: opts.coalesceMs ?? 5,
    };
  }

  get active(): number {
    return this.runs.size;
  }

  get free(): number {
    return Math.max(0, this.opts.maxRuns - this.runs.size);
  }

  /** Called whenever a slot frees up (the claimer wakes on it). */
  onSlotFreed(listener: () => void): () => void {
    this.slotListeners.add(listener);
    return () => this.slotListeners.delete(listener);
  }

  /** Take a slot for a claim that just hit and run it in the background. */
  start(claim: Claim): void {
    if (this.runs.has(claim.jobId)) throw new Error(`job ${claim.jobId} is already running here`);
    if (this.free === 0) throw new Error("no free run slot: the claimer must check capacity before claiming");
    const run = new ActiveRun(claim);
    const done = runJob(this.ctx, run).then(
      (result) => {
        if (result !== "not_started") this.opts.metrics.runsFinished.inc({ outcome: result });
      },
      (err: unknown) => {
        // Only the started CAS can throw here; an unstarted claim is released by the reaper.
        this.opts.log.error("run crashed before it started", { job_id: claim.jobId, ...errorFields(err) });
        this.opts.metrics.runsFinished.inc({ outcome: "start_error" });
      },
    );
    const entry = {
      run,
      done: done.finally(() => {
        this.runs.delete(claim.jobId);
        this.opts.metrics.runsActive.set(this.runs.size);
        for (const l of this.slotListeners) l();
      }),
    };
    this.runs.set(claim.jobId, entry);
    this.opts.metrics.runsActive.set(this.runs.size);
  }

  startHeartbeats(): void {
    const tick = () => {
      this.heartbeatInFlight = this.heartbeatOnce().finally(() => {
        this.heartbeatInFlight = null;
        if (this.heartbeatTimer) this.heartbeatTimer = setTimeout(tick, jitter(this.opts.heartbeatMs, 0.1));
      });
    };
    this.heartbeatTimer = setTimeout(tick, jitter(this.opts.heartbeatMs, 0.1));
  }

  async stopHeartbeats(): Promise<void> {
    clearTimeout(this.heartbeatTimer);
    this.heartbeatTimer = undefined;
    await this.heartbeatInFlight;
  }

  /** One heartbeat statement for every started run. */
  async heartbeatOnce(): Promise<void> {
    const running = [...this.runs.values()].map((e) => e.run).filter((r) => r.phase === "running" && r.identity);
    if (running.length === 0) return;
    let ours: Set<string>;
    try {
      ours = await heartbeat(
        this.opts.db,
        this.opts.hostId,
        running.map((r) => r.identity!),
      );
    } catch (err) {
      // Unknown is not lost: keep running; if Postgres stays away the reaper decides.
      this.opts.log.warn("heartbeat failed", { runs: running.length, ...errorFields(err) });
      return;
    }
    for (const run of running) {
      // A run that moved on to its terminal write meanwhile is no longer `running` in the row;
      // its fenced finishJob is the judge of ownership from there.
      if (run.phase !== "running" || ours.has(run.identity!.executionId)) continue;
      this.opts.log.warn("heartbeat: execution no longer ours; aborting it", {
        job_id: run.claim.jobId,
        execution_id: run.identity!.executionId,
      });
      run.loseOwnership();
    }
  }

  /**
   * Wait for running jobs up to `graceMs`; then abort the rest (they end `failed` with
   * `host_shutdown`) and wait for their terminal writes, bounded by `abortWaitMs`.
   */
  async shutdown(graceMs: number, abortWaitMs = 5000): Promise<void> {
    const all = () => Promise.all([...this.runs.values()].map((e) => e.done));
    if (await settlesWithin(all(), graceMs)) return;
    this.opts.log.warn("shutdown grace over; aborting runs", { runs: this.runs.size });
    for (const { run } of this.runs.values()) run.stopForShutdown();
    await settlesWithin(all(), abortWaitMs);
  }
}

async function settlesWithin(p: Promise<unknown>, ms: number): Promise<boolean> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<boolean>((resolve) => {
    timer = setTimeout(() => resolve(false), ms);
  });
  const result = await Promise.race([p.then(() => true), timeout]);
  clearTimeout(timer);
  return result;
}
