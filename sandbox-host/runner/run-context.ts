/**
 * What every step of a run shares: the host's collaborators (`RunDeps`), the run's own state
 * (`ActiveRun`, holding the identity its claim was made with; also read by the heartbeat loop,
 * the cancel watch and shutdown), the one object every step after the started CAS is handed
 * (`Execution`: the deps, the run and its identity, the job's row, emit, the abort signal), and
 * how a run's failure is made.
 */

import type { JobErrorCode } from "../../src/contracts/errors";
import type { EventPayload, EventType } from "../../src/contracts/events";
import { type JobError, tenantJobError } from "../../src/contracts/job";
import type { Db } from "../../src/db/client";
import type { FinalOutcome, Finish, FinishResult, PendingFacts, TimingPoint } from "../../src/db/ownership-repo";
import type { RunnableJob } from "../../src/db/run-repo";
import type { ExecutionIdentity } from "../../src/domain/identity";
import type { ModelCatalog } from "../../src/domain/models";
import type { LeaseStore, QuotaLease } from "../../src/quota/lease-store";
import type { WaitOutcome } from "../../src/quota/wait";
import type { ArtifactSettings } from "../artifacts/blob-client";
import type { CodeTools } from "../code-tools/code-tool-pool";
import type { Logger } from "../log";
import type { McpHostConfig } from "../mcp/mcp-config";
import type { McpToolset } from "../mcp/toolset";
import type { HostMetrics } from "../metrics/metrics";
import type { ModelClient } from "../model/types";
import type { OffloadPool } from "../offload/pool";
import type { Outbox } from "../outbox/outbox";
import type { SandboxManager } from "../sandbox/manager";
import type { HostTracing } from "../tracing/tracing";
import { type JournalStore, RunJournal, type WorkspaceLink, type WorkspaceSnapshot } from "./journal";
import type { RetryPolicy } from "./model-retry";
import type { Tree } from "./workspace-diff";

/**
 * The host's collaborators, built once by the Runner and handed to every run (as trigger.dev's
 * run engine hands one typed resources object to every system): what a step needs from the host
 * is a field here, never a parameter of its own or an optional hook with a default.
 */
export interface RunDeps {
  db: Db;
  /** The job journal's fenced appends and reads (journal.ts): every completed step, before the next. */
  journal: JournalStore;
  /** The run's own row writes that the Runner group-commits (start-batcher.ts, finish-batcher.ts). */
  writes: RunWrites;
  model: ModelClient;
  outbox: Outbox;
  log: Logger;
  /** Deltas arriving within this window become one `model.delta` event. */
  coalesceMs: number;
  /** Phase histograms (observed from the timing facts the terminal write returned) and the run's counters. */
  metrics: RunMetrics;
  /** Where a run's tenant-priced CPU work goes (the answer's response_format check), off the loop. */
  offload: Pick<OffloadPool, "run">;
  /** The host's code tools (HOST_TOOLS), each call on a tool thread; absent = none on this host. */
  codeTools?: Pick<CodeTools, "spec" | "call">;
  /** Global model quota (named leases shared by every host); absent = no quota. */
  quota?: QuotaGate;
  /** Docker sandboxes for tool calls; absent = tool runs fail with tools_unavailable. */
  sandbox?: SandboxManager;
  /** Where a run's /workspace/out/ files go at its end (artifacts.ts); absent = no artifacts kept. */
  artifacts?: ArtifactSettings;
  /**
   * A run's sandbox is gone but its cleanup fence could not be cleared: the janitor clears it
   * later (`SandboxJanitor.settle`). No listing would ever find the sandbox again.
   */
  fenceOwed: (executionId: string) => void;
  /** The models jobs may run on, the default first; a job naming another one fails unrun. */
  models: ModelCatalog;
  /** Which failed model calls are tried again, and how long a turn may spend on it. */
  retry: RetryPolicy;
  /**
   * MODEL_MAX_OUTPUT_TOKENS: the output bound sent with a call whose agent sets none, so every
   * call's worst case (what budgets reserve) is bounded. Absent: AGENT_LIMITS.defaultMaxOutputTokens.
   */
  defaultMaxOutputTokens?: number;
  /** The URLs MCP calls may go to and the secrets their headers may name; absent = MCP off. */
  mcp?: McpHostConfig;
  /**
   * The tenant queued-jobs limit the gateway applies at submit (MAX_QUEUED_JOBS_PER_TENANT),
   * applied here to the children a turn's delegate calls would queue; 0 or absent: no check.
   */
  maxQueuedJobsPerTenant?: number;
  /** OpenTelemetry spans of each run (sandbox-host/tracing/spans.ts); off: the API's no-op tracer. */
  tracing: HostTracing;
}

/**
 * What a run needs from the quota: the store, the limits, and the host's renewal registry. One of
 * the host's collaborators (`RunDeps.quota`), so declared beside them; quota-gate.ts uses it.
 */
export interface QuotaGate {
  store: LeaseStore;
  /** Slots per model across all hosts, for a model whose registry entry sets no `concurrency`. */
  modelLimit: number;
  /** Slots per tenant across all hosts (0 = no tenant quota). */
  tenantLimit: number;
  maxWaitMs: number;
  /** Register a lease with the host's batched renewal; the callback fires if it is lost (purged, or past its deadline). */
  track(lease: QuotaLease, onLost: () => void): void;
  untrack(lease: QuotaLease): void;
  /** Once per finished wait, however it ended (the host's quota_wait_seconds). */
  onWait?(outcome: WaitOutcome): void;
}

/** The started CAS and the terminal write, each fenced by the execution identity. */
export interface RunWrites {
  /** The started CAS: whether it hit, and when its statement was sent (the lease counts from there). */
  start(id: ExecutionIdentity): Promise<{ started: boolean; sentAt: number }>;
  finish(finish: Finish): Promise<FinishResult>;
}

/** The host metrics a run observes. */
export type RunMetrics = Pick<
  HostMetrics,
  | "runPhase"
  | "cancelConvergence"
  | "modelTokens"
  | "modelCost"
  | "modelCalls"
  | "modelRetries"
  | "modelFallbacks"
  | "modelRetryDelay"
  | "waitsStarted"
  | "waitDuration"
  | "quotaLeasesLost"
  | "budgetReservations"
  | "budgetSettlements"
>;

/** Emit one event of the run (dropped once the run is no longer the owner). */
export type Emit = <T extends EventType>(type: T, payload: EventPayload<T>) => void;

export type RunPhase = "claimed" | "running" | "finishing" | "done";

/** Why a run stopped early, set by whoever aborts it. */
export type AbortReason = "ownership_lost" | "host_shutdown" | "cancelled";

/** The state a run shares with the heartbeat loop and shutdown. */
export class ActiveRun {
  phase: RunPhase = "claimed";
  /** False once we know we are not the owner: nothing more is emitted under this identity. */
  owned = true;
  abortReason: AbortReason | null = null;
  readonly abort = new AbortController();
  /** When this run prepared / first produced output (host instants), written by a later fenced write. */
  readonly facts: PendingFacts = {};
  /** The facts a fenced write (heartbeat or terminal) has put in the row. */
  readonly factsLanded = new Set<TimingPoint>();

  /**
   * @param selfFence how long after the last acknowledged heartbeat was *sent* this run stops on
   *   its own (see `renew`), and who is told when it does; absent: never (unit tests that drive a
   *   run by hand).
   */
  constructor(
    /** The identity the claim was won with (the claimer made it); every write of the run carries it. */
    readonly identity: ExecutionIdentity,
    private readonly selfFence?: { afterMs: number; onFence: (run: ActiveRun) => void },
  ) {}

  /**
   * The started CAS hit: from here the heartbeat carries the identity. `sentAt`
   * (performance.now() before the CAS was sent) starts the ownership lease, as a heartbeat does.
   */
  start(sentAt = performance.now()): this {
    this.phase = "running";
    this.renew(sentAt);
    return this;
  }

  private fenceTimer: NodeJS.Timeout | null = null;

  /**
   * A fenced write carrying this identity (the started CAS, a heartbeat) was acknowledged as
   * ours; it was sent at `sentAt`. The row's heartbeat is Postgres' now() when the statement ran,
   * which is no earlier than `sentAt`, so `sentAt + runLostAfterMs` (our monotonic clock) comes no
   * later than the moment any reaper may call this run lost and hand the job to a new execution.
   * Past that moment this execution must have stopped its side effects: a host cut off from
   * Postgres (a partition; heartbeats failing is "unknown", not "lost") would otherwise go on
   * calling tools while the new execution calls them too. So the run stops itself a margin
   * earlier (Runner: a quarter heartbeat period, for timer lateness and for the abort to reach a
   * tool call in flight; the hand-off itself needs a reaper pass, a claim and a start after the
   * bound). Not more: a heartbeat slowed past the fence but not past the bound stops a run that
   * was never in danger (measured in chaos:claims at load 9, lost 1.2 s, heartbeat 0.3 s: a
   * whole period of margin self-fenced ~10 healthy runs in 80 jobs). Monotonic, so a host whose
   * wall clock is off does not move the moment.
   */
  renew(sentAt: number): void {
    const fence = this.selfFence;
    if (!fence || this.phase !== "running") return;
    if (this.fenceTimer) clearTimeout(this.fenceTimer);
    const ms = Math.max(0, sentAt + fence.afterMs - performance.now());
    this.fenceTimer = setTimeout(() => {
      this.fenceTimer = null;
      // The terminal write (or suspend) is under way: its own fence judges it.
      if (this.phase !== "running" || !this.owned) return;
      this.loseOwnership("lease_passed");
      fence.onFence(this);
    }, ms);
    this.fenceTimer.unref();
  }

  /** The run ended: no self-fence is pending any more. */
  disarm(): void {
    if (this.fenceTimer) clearTimeout(this.fenceTimer);
    this.fenceTimer = null;
  }

  /** Why ownership was lost: a heartbeat said the row is no longer ours, or our lease passed unacknowledged. */
  lostBy: "heartbeat" | "lease_passed" | null = null;

  /** Observe a timing fact once; it rides on the next heartbeat or the terminal write. */
  observe(point: TimingPoint): void {
    this.facts[point] ??= performance.now();
  }

  /** The observed facts no fenced write has landed yet. */
  pendingFacts(): PendingFacts {
    const out: PendingFacts = {};
    for (const [point, t] of Object.entries(this.facts) as Array<[TimingPoint, number]>) {
      if (!this.factsLanded.has(point)) out[point] = t;
    }
    return out;
  }

  /** The row is no longer ours (or may not be): stop the model stream, emit nothing more. */
  loseOwnership(by: "heartbeat" | "lease_passed" = "heartbeat"): void {
    if (!this.owned) return;
    this.owned = false;
    this.lostBy = by;
    this.disarm();
    this.abortReason ??= "ownership_lost";
    this.abort.abort(new Error("ownership lost"));
  }

  /** A cancel was requested (hint or durable flag): stop the model stream; the run ends `cancelled`. */
  cancel(via: "hint" | "durable"): boolean {
    if (this.abortReason) return false;
    this.abortReason = "cancelled";
    this.cancelledVia = via;
    this.abort.abort(new Error("cancelled"));
    return true;
  }

  cancelledVia: "hint" | "durable" | null = null;

  /**
   * Whether the tenant's daily budget is spent, as this run's last usage write said (null: no
   * write yet; the job's read at the start says). Read before each model turn (model-call.ts).
   */
  budgetSpent: boolean | null = null;
  /** A sandbox may exist for this run: it must be destroyed at the end, inside the cleanup fence. */
  sandboxUsed = false;
  /**
   * The workspace snapshot this run continues from (a recovery's, a resume's): unpacked into the
   * sandbox before its first tool call, then cleared (workspace.ts).
   */
  pendingRestore: WorkspaceSnapshot | null = null;
  /**
   * The agent keeps a conversation workspace and this run has none of its own yet: its first
   * tool call restores the conversation's last snapshot, if there is one (workspace.ts).
   */
  conversationRestore = false;
  /** A tool call since the last snapshot may have changed /workspace: snapshot after its result. */
  workspaceDirty = false;
  /** The hash of the last snapshot taken or restored: an unchanged workspace is not stored again. */
  lastSnapshot: string | null = null;
  /** The blobs of the last snapshot taken or restored, its full first: the next diff's base (workspace.ts). */
  workspaceChain: WorkspaceLink[] = [];
  /** The workspace's tree as the last snapshot took or restored it; null: the next snapshot is full. */
  workspaceTree: Tree | null = null;
  /** The run's MCP sessions (agents with mcp_servers), closed when the run ends. */
  mcp: McpToolset | null = null;

  /**
   * Shutdown grace ran out: stop the model stream; the run is handed to a new execution at its
   * last journaled step (run-job.ts), or fails `host_shutdown` when its agent allows no recovery.
   */
  stopForShutdown(): void {
    this.abortReason ??= "host_shutdown";
    this.abort.abort(new Error("host shutting down"));
  }
}

/**
 * One execution of a claimed job, built once by `runJob` the moment its started CAS hits and
 * passed whole to every step from there to the terminal write (the first step, `readRow`, reads
 * the job's row into it), each step taking what else it needs as named options. The identity has
 * one home, the run (the heartbeat reads it there); `id` reads it.
 */
export class Execution {
  readonly deps: RunDeps;
  readonly run: ActiveRun;
  /** Emit one event under this execution (dropped once the run is no longer the owner). */
  readonly emit: Emit;
  /** This execution's journal writer (steps appended under its identity). */
  readonly journal: RunJournal;
  private row: RunnableJob | null;

  constructor(parts: { deps: RunDeps; run: ActiveRun; emit: Emit; job?: RunnableJob; journal?: RunJournal }) {
    this.deps = parts.deps;
    this.run = parts.run;
    this.emit = parts.emit;
    this.row = parts.job ?? null;
    this.journal = parts.journal ?? new RunJournal(parts.deps.journal, parts.run);
  }

  /**
   * The job's row as this execution read it, once (a later agent version never reaches it). Only
   * `readRow`, the first step, runs before it is there; a step reading it earlier is a bug.
   */
  get job(): RunnableJob {
    if (this.row === null) throw new Error("the execution's job row is read by its first step (readRow)");
    return this.row;
  }

  /** The first step read the row (`readRow`): set once. */
  rowRead(job: RunnableJob): void {
    if (this.row !== null) throw new Error("the execution's job row is read once");
    this.row = job;
  }

  /**
   * The same execution seen through another emit (a span watching a tool's events): one journal
   * writer, so a step noted to ride on the next write (the turn on its first call) is not lost.
   */
  withEmit(emit: Emit): Execution {
    return new Execution({ deps: this.deps, run: this.run, emit, job: this.row ?? undefined, journal: this.journal });
  }

  /** The identity every fenced write of this execution carries. */
  get id(): ExecutionIdentity {
    return this.run.identity;
  }

  /** Aborted when the run must stop (`run.abortReason` says why). */
  get signal(): AbortSignal {
    return this.run.abort.signal;
  }

  /** Log fields naming the execution. */
  get fields(): { job_id: string; execution_id: string } {
    return runFields(this.id);
  }
}

/** The outcome of a run stopped by `run.abortReason`, with the text it had produced so far. */
export function abortedOutcome(run: ActiveRun, text: string): FinalOutcome {
  if (run.abortReason === "cancelled") return { state: "cancelled", output: text || null };
  return run.abortReason === "host_shutdown"
    ? failed("host_shutdown", "the sandbox-host shut down before the run finished", text)
    : failed("aborted", "the run was aborted", text);
}

export function failed(code: JobErrorCode, message: string, partialOutput: string): FinalOutcome {
  // The one place a run's error is made: the row and the run.failed event both carry this.
  const error: JobError = tenantJobError({ code, message });
  return { state: "failed", error, output: partialOutput || null };
}

/** Log fields naming the execution. */
export function runFields(id: ExecutionIdentity): { job_id: string; execution_id: string } {
  return { job_id: id.jobId, execution_id: id.executionId };
}
