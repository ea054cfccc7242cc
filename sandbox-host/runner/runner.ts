/**
 * Run slots, heartbeats and shutdown for every run a host holds. A slot is taken the moment a
 * claim hits (so the claimer can never hold more than `maxRuns` claimed-or-running jobs) and is
 * freed when the run really ends. Heartbeats are one statement for all runs every ~2 s; a run
 * missing from its answer has lost ownership and is aborted without emitting anything further.
 */
import type { Db } from "../../src/db/client";
import { appendJournal, markRecovered, readJournal } from "../../src/db/journal-repo";
import { cancelRequested, heartbeat, type TimingPoint } from "../../src/db/ownership-repo";
import { settlesWithin } from "../../src/domain/async";
import type { ExecutionIdentity } from "../../src/domain/identity";
import type { ModelCatalog } from "../../src/domain/models";
import type { RedisKeys } from "../../src/quota/keys";
import type { LeaseStore, QuotaLease } from "../../src/quota/lease-store";
import type { Redis } from "../../src/quota/redis";
import type { ArtifactSettings } from "../artifacts/blob-client";
import type { CodeTools } from "../code-tools/code-tool-pool";
import { PeriodicTask } from "../lifecycle/periodic";
import type { Service } from "../lifecycle/service";
import { errorFields, type Logger } from "../log";
import type { McpHostConfig } from "../mcp/mcp-config";
import type { HostMetrics } from "../metrics/metrics";
import type { ModelClient } from "../model/types";
import type { OffloadPool } from "../offload/pool";
import type { Outbox } from "../outbox/outbox";
import type { SandboxManager } from "../sandbox/manager";
import { type HostTracing, TRACING_OFF } from "../tracing/tracing";
import { FinishBatcher } from "./finish-batcher";

/**
 * How long a shutdown waits, after the grace, for the runs it stopped to be handed off (a
 * sandbox removal and one statement each) or failed: part of a pod's termination budget
 * (deploy/k8s/deployment.yaml, test/unit/k8s-manifests.test.ts).
 */
export const HAND_OFF_WAIT_MS = 5000;

import type { RetryPolicy } from "./model-retry";
import { ActiveRun, type QuotaGate, type RunDeps, runFields } from "./run-context";
import { runJob } from "./run-job";
import { StartBatcher } from "./start-batcher";

export interface RunnerOptions {
  db: Db;
  /** The lease's own connections (host-parts.ts heartbeatPool) for heartbeats and started CASes, so they never queue behind runs; default `db`. */
  heartbeatDb?: Db;
  maxRuns: number;
  model: ModelClient;
  outbox: Outbox;
  log: Logger;
  metrics: HostMetrics;
  heartbeatMs: number;
  /**
   * The fleet's lost bound (HOST_RUN_LOST_AFTER_MS, the reapers' and the cron backstop's): a run
   * whose last acknowledged heartbeat was sent longer ago than this, less a quarter heartbeat
   * period, stops itself (ActiveRun.renew). Absent: runs never self-fence.
   */
  runLostAfterMs?: number;
  coalesceMs?: number;
  /** Cancel hints (Redis): one MGET for all running jobs this often (~100 ms to notice on average). */
  redis?: Redis;
  keys?: RedisKeys;
  cancelHintMs?: number;
  /** Durable cancel flags (Postgres): one query for all running jobs this often (≈1 s). */
  cancelDurableMs?: number;
  /**
   * While `when()` holds, the cancel watch checks only every `everyMs` (hint and durable flag
   * together): the fleet's only work is this host's runs (lifecycle/activity.ts, an owner's
   * quiet), its LISTEN session is up, and a cancel's own NOTIFY (ear_cancel) runs a check at once
   * (wakeCancelCheck); the slow check is the backstop for a notification lost on a dead session.
   * `hurryCancelWatch()` puts it back on its busy period.
   */
  cancelIdle?: { everyMs: number; when: () => boolean };
  /** Global model quota; leases of all runs are renewed in one call per heartbeat. */
  quota?: Omit<QuotaGate, "track" | "untrack">;
  sandbox?: SandboxManager;
  /** See RunDeps.artifacts (absent: no artifacts kept). */
  artifacts?: ArtifactSettings;
  /** See RunDeps.fenceOwed (absent: nothing is owed to anyone). */
  fenceOwed?: (executionId: string) => void;
  /**
   * Admission headroom for sandboxes: while this many sandbox creations wait for a turn, the
   * host claims nothing more (default: no bound). Work already admitted is served first, and a
   * job left unclaimed stays queued for a host with room, rather than lining up here.
   */
  sandboxQueueLimit?: number;
  /** The models jobs may run on, the default first. */
  models: ModelCatalog;
  /** Retries of model calls that failed before output (default: none). */
  retry?: RetryPolicy;
  /** MODEL_MAX_OUTPUT_TOKENS (default AGENT_LIMITS.defaultMaxOutputTokens). */
  defaultMaxOutputTokens?: number;
  /** MCP's allowed URLs and secrets (default: MCP off). */
  mcp?: McpHostConfig;
  /** Child jobs a delegating run may queue while its tenant has this many queued (0 or absent: no check). */
  maxQueuedJobsPerTenant?: number;
  /** The host's code tools (HOST_TOOLS, RunDeps.codeTools); absent: none. */
  codeTools?: Pick<CodeTools, "spec" | "call">;
  /** The host's offload pool (RunDeps.offload). */
  offload: Pick<OffloadPool, "run">;
  /** OpenTelemetry (RunDeps.tracing; default: off). */
  tracing?: HostTracing;
}

const NO_RETRIES: RetryPolicy = { maxRetries: 0, baseMs: 1, maxDelayMs: 1, budgetMs: 0 };

export class Runner {
  private readonly runs = new Map<string, { run: ActiveRun; done: Promise<void> }>();
  private readonly slotListeners = new Set<() => void>();
  private lastDurableCheck = 0;
  /** Quota leases held by runs here, renewed together (one Redis call per heartbeat). */
  private readonly leases = new Map<string, { lease: QuotaLease; onLost: () => void }>();
  /** The collaborators every run gets, built once. */
  private readonly deps: RunDeps;
  /** One heartbeat statement for every started run, every ~heartbeatMs (fixed rate, ±10%: see the constructor). */
  readonly heartbeats: PeriodicTask;
  /**
   * Cancel watch: every ~200 ms one batched Redis read of the hint keys of all runs here, and
   * every ~1 s one batched Postgres query of their durable cancel flags (which converges even
   * with Redis down). No subscription per run: cost is constant in the number of runs. Fixed
   * rate, not fixed delay: a check that took 40 ms under load must not stretch the period to
   * 240 ms, since how long a cancel waits to be seen is what this loop is for. Its stop also
   * waits for a wake-up check (wakeCancelCheck) still running.
   */
  readonly cancelWatch: Service;
  private readonly cancelChecks: PeriodicTask;

  constructor(private readonly opts: RunnerOptions) {
    const starts = new StartBatcher(opts.heartbeatDb ?? opts.db);
    const finishes = new FinishBatcher(opts.db);
    this.deps = {
      db: opts.db,
      journal: {
        append: (id, rows) => appendJournal(opts.db, id, rows),
        read: (jobId) => readJournal(opts.db, jobId),
        recovered: (id, payload) => markRecovered(opts.db, id, payload),
      },
      writes: { start: (id) => starts.start(id), finish: (f) => finishes.finish(f) },
      model: opts.model,
      outbox: opts.outbox,
      log: opts.log,
      coalesceMs: opts.coalesceMs ?? 30,
      metrics: opts.metrics,
      sandbox: opts.sandbox,
      artifacts: opts.artifacts,
      fenceOwed: opts.fenceOwed ?? (() => {}),
      models: opts.models,
      retry: opts.retry ?? NO_RETRIES,
      ...(opts.defaultMaxOutputTokens === undefined ? {} : { defaultMaxOutputTokens: opts.defaultMaxOutputTokens }),
      mcp: opts.mcp,
      maxQueuedJobsPerTenant: opts.maxQueuedJobsPerTenant,
      offload: opts.offload,
      codeTools: opts.codeTools,
      tracing: opts.tracing ?? TRACING_OFF,
      quota: opts.quota
        ? {
            ...opts.quota,
            track: (lease, onLost) => {
              this.leases.set(lease.holder, { lease, onLost });
              this.opts.metrics.quotaLeasesHeld?.set(this.leases.size);
            },
            untrack: (lease) => {
              this.leases.delete(lease.holder);
              this.opts.metrics.quotaLeasesHeld?.set(this.leases.size);
            },
          }
        : undefined,
    };
    const onError = (what: string) => (err: unknown) => opts.log.warn(`${what} failed`, errorFields(err));
    this.heartbeats = new PeriodicTask(
      // Fixed rate: the period is a liveness bound (the reaper counts missed heartbeats), so a
      // statement slowed by load must not push the next one a full period later.
      { name: "heartbeats", everyMs: opts.heartbeatMs, spread: 0.1, fixedRate: true, onError: onError("heartbeat") },
      () => this.heartbeatOnce(),
    );
    this.cancelChecks = new PeriodicTask(
      {
        name: "cancel watch",
        everyMs: opts.cancelHintMs ?? 200,
        spread: 0.1,
        fixedRate: true,
        onError: onError("cancel check"),
        idle: opts.cancelIdle,
      },
      () => this.checkCancels(),
    );
    this.cancelWatch = {
      name: "cancel watch",
      start: () => this.cancelChecks.start(),
      stop: async () => {
        const stopped = this.cancelChecks.stop();
        await this.cancelWakeInFlight;
        await stopped;
      },
    };
  }

  get active(): number {
    return this.runs.size;
  }

  /** Run slots the claimer may fill now: 0 while the work already admitted lacks headroom. */
  get free(): number {
    return this.headroom() ? Math.max(0, this.opts.maxRuns - this.runs.size) : 0;
  }

  /** Whether the work already admitted leaves room to claim more (free slots aside). */
  headroom(): boolean {
    const limit = this.opts.sandboxQueueLimit;
    if (limit === undefined || !this.opts.sandbox) return true;
    return this.opts.sandbox.creationLoad().queued < limit;
  }

  /** Called whenever a slot frees up (the claimer wakes on it). */
  onSlotFreed(listener: () => void): () => void {
    this.slotListeners.add(listener);
    return () => this.slotListeners.delete(listener);
  }

  /** Take a slot for a claim that just hit and run it, under the identity it was won with, in the background. */
  start(id: ExecutionIdentity): void {
    if (this.runs.has(id.jobId)) throw new Error(`job ${id.jobId} is already running here`);
    // Slots only, not headroom: a claim already won while the sandbox queue grew is still run here
    // (headroom decides the next claim; a won claim left unstarted would wait for the reaper).
    if (this.runs.size >= this.opts.maxRuns) {
      throw new Error("no free run slot: the claimer must check capacity before claiming");
    }
    const lost = this.opts.runLostAfterMs;
    const run = new ActiveRun(
      id,
      lost === undefined
        ? undefined
        : {
            afterMs: Math.max(0, lost - this.opts.heartbeatMs / 4),
            onFence: (r) => {
              this.opts.metrics.runsSelfFenced.inc();
              this.opts.log.warn("self-fence: no heartbeat acknowledged within the lost bound; run stopped", {
                job_id: r.identity.jobId,
                execution_id: r.identity.executionId,
                lost_after_ms: lost,
              });
            },
          },
    );
    const done = runJob(this.deps, run).then(
      (result) => {
        if (result !== "not_started") this.opts.metrics.runsFinished.inc({ outcome: result });
        // runJob logged the other two itself (it never started them).
        if (result !== "not_started" && result !== "cancelled_before_start")
          this.opts.log.info("job run ended", { ...runFields(id), outcome: result });
      },
      (err: unknown) => {
        // Only the started CAS can throw here; an unstarted claim is released by the reaper.
        this.opts.log.error("run crashed before it started", { job_id: id.jobId, ...errorFields(err) });
        this.opts.metrics.runsFinished.inc({ outcome: "start_error" });
      },
    );
    const entry = {
      run,
      done: done.finally(() => {
        run.disarm();
        this.runs.delete(id.jobId);
        this.opts.metrics.runsActive.set(this.runs.size);
        for (const l of this.slotListeners) l();
      }),
    };
    this.runs.set(id.jobId, entry);
    this.opts.metrics.runsActive.set(this.runs.size);
  }

  /** Renew every lease held here in one call per heartbeat interval; a lost lease stops its run. */
  leaseRenewal(store: LeaseStore): PeriodicTask {
    return new PeriodicTask(
      {
        name: "quota lease renewal",
        everyMs: this.opts.heartbeatMs,
        spread: 0.1,
        // Fixed rate: a lease is valid for 3 periods from the SEND of its last renewal. With a
        // fixed delay, a renewal taking longer than a period under load (Redis round trips of
        // over 1 s were seen with the machine's load average at 44) pushed the next send a
        // whole period further and leases ran out mid-turn (quota_lease_lost).
        fixedRate: true,
        onError: (err) => this.opts.log.warn("quota lease renewal failed", errorFields(err)),
      },
      () => this.renewOnce(store),
    );
  }

  async renewOnce(store: LeaseStore): Promise<void> {
    // Past its local deadline a lease is lost whatever Redis would say (lease-store.ts, isValid).
    // This is what ends leases while Redis cannot be asked: fail closed.
    for (const { lease } of [...this.leases.values()]) {
      if (!store.isValid(lease)) this.loseLease(lease.holder, "quota lease ran out before it was renewed");
    }
    if (this.leases.size === 0) return;
    try {
      const { lost } = await store.renew([...this.leases.values()].map((l) => l.lease));
      for (const lease of lost) this.loseLease(lease.holder, "quota lease lost on renewal");
    } catch (err) {
      // Redis unreachable: the leases run out on their own deadline (checked above on every tick).
      this.opts.log.warn("quota lease renewal failed", errorFields(err));
    }
  }

  private loseLease(holder: string, why: string): void {
    const entry = this.leases.get(holder);
    if (!entry) return;
    this.leases.delete(holder);
    this.opts.metrics.quotaLeasesHeld?.set(this.leases.size);
    this.opts.metrics.quotaLeasesLost?.inc();
    this.opts.log.warn(`${why}; stopping that run's model calls`, { holder });
    entry.onLost();
  }

  /** Work appeared (lifecycle/activity.ts): an idle-period wait of the cancel watch is cut short. */
  hurryCancelWatch(): void {
    this.cancelChecks.hurry();
  }

  /**
   * Postgres announced a cancel for one of our runs (LISTEN ear_cancel): run a check with the
   * durable query now rather than at the next tick. Wake-ups that arrive while a check is in
   * flight fold into one more check after it, so a burst of cancels costs a few batched queries,
   * not one per cancel.
   */
  wakeCancelCheck(): void {
    this.cancelWakePending = true;
    if (this.cancelWakeInFlight || !this.cancelChecks.running) return;
    this.cancelWakeInFlight = (async () => {
      while (this.cancelWakePending && this.cancelChecks.running) {
        this.cancelWakePending = false;
        // After the check in flight, never alongside it (runNow waits for it).
        await this.cancelChecks.runNow(() => {
          // Postgres announced it, so the durable flag is there to read; the hint may not be set
          // yet (the gateway sets it after the commit), so only the durable query runs.
          this.lastDurableCheck = 0;
          return this.checkCancels({ durableOnly: true });
        });
      }
    })().finally(() => {
      this.cancelWakeInFlight = null;
    });
  }

  private cancelWakePending = false;
  private cancelWakeInFlight: Promise<void> | null = null;

  /** One cancel check: hints (unless `durableOnly`), durable flags when due. */
  async checkCancels(opts: { durableOnly?: boolean } = {}): Promise<void> {
    const live = [...this.runs.values()]
      .map((e) => e.run)
      .filter((r) => r.phase === "claimed" || r.phase === "running");
    if (live.length === 0) return;
    const ids = live.map((r) => r.identity.jobId);
    const cancel = (jobIds: Set<string>, via: "hint" | "durable") => {
      for (const run of live) {
        if (jobIds.has(run.identity.jobId) && run.cancel(via)) {
          this.opts.log.info("cancel requested; stopping the run", { job_id: run.identity.jobId, via });
        }
      }
    };
    const { redis, keys } = this.opts;
    if (redis && keys && !opts.durableOnly) {
      try {
        const hints = await redis.mget<(string | null)[]>(...ids.map((id) => keys.cancelHint(id)));
        cancel(new Set(ids.filter((_, i) => hints[i] !== null && hints[i] !== undefined)), "hint");
      } catch {
        // Redis down: the durable check below still converges within ~1 s.
      }
    }
    const now = Date.now();
    if (now - this.lastDurableCheck >= (this.opts.cancelDurableMs ?? 1000)) {
      this.lastDurableCheck = now;
      try {
        cancel(await cancelRequested(this.opts.db, ids), "durable");
      } catch (err) {
        this.opts.log.warn("durable cancel check failed", errorFields(err));
      }
    }
  }

  /** One heartbeat statement for every started run. */
  async heartbeatOnce(): Promise<void> {
    const running = [...this.runs.values()].map((e) => e.run).filter((r) => r.phase === "running");
    if (running.length === 0) return;
    let ours: Set<string>;
    // Each run's timing facts not yet in the row ride along (no statement of their own).
    const sent = running.map((r) => ({ ...r.identity, facts: r.pendingFacts() }));
    const sentAt = performance.now();
    try {
      ours = await heartbeat(this.opts.heartbeatDb ?? this.opts.db, sent);
    } catch (err) {
      // Unknown is not lost: keep running; if Postgres stays away the reaper decides.
      this.opts.log.warn("heartbeat failed", { runs: running.length, ...errorFields(err) });
      return;
    }
    running.forEach((run, i) => {
      if (!ours.has(run.identity.executionId)) return;
      run.renew(sentAt);
      for (const point of Object.keys(sent[i]?.facts ?? {})) run.factsLanded.add(point as TimingPoint);
    });
    for (const run of running) {
      // A run that moved on to its terminal write meanwhile is no longer `running` in the row;
      // its fenced terminal write is the judge of ownership from there.
      if (run.phase !== "running" || ours.has(run.identity.executionId)) continue;
      this.opts.log.warn("heartbeat: execution no longer ours; aborting it", {
        job_id: run.identity.jobId,
        execution_id: run.identity.executionId,
      });
      run.loseOwnership();
    }
  }

  /**
   * Wait for running jobs up to `graceMs`; then abort the rest (each is handed off to a new
   * execution at its last journaled step, or, when its agent allows no recovery, ends `failed`
   * with `host_shutdown`) and wait for those writes, bounded by `abortWaitMs`.
   */
  async shutdown(graceMs: number, abortWaitMs = HAND_OFF_WAIT_MS): Promise<void> {
    const all = () => Promise.all([...this.runs.values()].map((e) => e.done));
    if (await settlesWithin(all(), graceMs)) return;
    this.opts.log.warn("shutdown grace over; aborting runs", { runs: this.runs.size });
    for (const { run } of this.runs.values()) run.stopForShutdown();
    await settlesWithin(all(), abortWaitMs);
  }
}
