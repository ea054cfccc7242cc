/**
 * What every step of a run shares: the host's collaborators (`RunDeps`), the run's own state
 * (`ActiveRun`, also read by the heartbeat loop, the cancel watch and shutdown), the one object a
 * step is handed (`Execution`: the deps, the started run and its identity, the job's row, emit,
 * the abort signal), and how a run's failure is made.
 */

import type { JobErrorCode } from "../../src/contracts/errors";
import type { EventPayload, EventType } from "../../src/contracts/events";
import { type JobError, tenantJobError } from "../../src/contracts/job";
import type { Db } from "../../src/db/client";
import type { FinalOutcome, Finish, FinishResult, PendingFacts, TimingPoint } from "../../src/db/ownership-repo";
import type { RunnableJob } from "../../src/db/run-repo";
import type { Claim, ExecutionIdentity } from "../../src/domain/identity";
import type { ModelCatalog } from "../../src/domain/models";
import type { Logger } from "../log";
import type { McpHostConfig } from "../mcp/mcp-config";
import type { McpToolset } from "../mcp/toolset";
import type { HostMetrics } from "../metrics/metrics";
import type { ModelClient } from "../model/types";
import type { OffloadPool } from "../offload/pool";
import type { Outbox } from "../outbox/outbox";
import type { SandboxManager } from "../sandbox/manager";
import type { HostTracing } from "../tracing/tracing";
import type { RetryPolicy } from "./model-retry";
import type { QuotaGate } from "./quota-gate";

/**
 * The host's collaborators, built once by the Runner and handed to every run (as trigger.dev's
 * run engine hands one typed resources object to every system): what a step needs from the host
 * is a field here, never a parameter of its own or an optional hook with a default. A new
 * collaborator (issue 27's journal writer, called at every completed step) is one more field.
 */
export interface RunDeps {
  db: Db;
  hostId: string;
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
  /** Global model quota (named leases shared by every host); absent = no quota. */
  quota?: QuotaGate;
  /** Docker sandboxes for tool calls; absent = tool runs fail with tools_unavailable. */
  sandbox?: SandboxManager;
  /**
   * A run's sandbox is gone but its cleanup fence could not be cleared: the janitor clears it
   * later (`SandboxJanitor.settle`). No listing would ever find the sandbox again.
   */
  fenceOwed: (executionId: string) => void;
  /** The models jobs may run on, the default first; a job naming another one fails unrun. */
  models: ModelCatalog;
  /** Which failed model calls are tried again, and how long a turn may spend on it. */
  retry: RetryPolicy;
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

/** The started CAS and the terminal write, each fenced by the execution identity. */
export interface RunWrites {
  start(id: ExecutionIdentity): Promise<boolean>;
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
  | "modelRetryDelay"
  | "waitsStarted"
  | "waitDuration"
  | "quotaLeasesLost"
>;

/** Emit one event of the run (dropped once the run is no longer the owner). */
export type Emit = <T extends EventType>(type: T, payload: EventPayload<T>) => void;

export type RunPhase = "claimed" | "running" | "finishing" | "done";

/** Why a run stopped early, set by whoever aborts it. */
export type AbortReason = "ownership_lost" | "host_shutdown" | "cancelled";

/** The state a run shares with the heartbeat loop and shutdown. */
export class ActiveRun {
  phase: RunPhase = "claimed";
  identity: ExecutionIdentity | null = null;
  /** False once we know we are not the owner: nothing more is emitted under this identity. */
  owned = true;
  abortReason: AbortReason | null = null;
  readonly abort = new AbortController();
  /** When this run prepared / first produced output (host instants), written by a later fenced write. */
  readonly facts: PendingFacts = {};
  /** The facts a fenced write (heartbeat or terminal) has put in the row. */
  readonly factsLanded = new Set<TimingPoint>();

  constructor(readonly claim: Claim) {}

  /** The started CAS hit under `id`: from here the heartbeat carries this identity. */
  start(id: ExecutionIdentity): StartedRun {
    this.identity = id;
    this.phase = "running";
    return this as StartedRun;
  }

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

  /** A heartbeat found the row no longer ours: stop the model stream, emit nothing more. */
  loseOwnership(): void {
    if (!this.owned) return;
    this.owned = false;
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
  /** The run's MCP sessions (agents with mcp_servers), closed when the run ends. */
  mcp: McpToolset | null = null;

  /** Shutdown grace ran out: stop the model stream and fail the run honestly. */
  stopForShutdown(): void {
    this.abortReason ??= "host_shutdown";
    this.abort.abort(new Error("host shutting down"));
  }
}

/** A run whose started CAS hit: its identity is set (`ActiveRun.start`), once. */
export type StartedRun = ActiveRun & { identity: ExecutionIdentity };

/** What an execution is before its job's row is read (the row is read by its first step). */
export interface ExecutionParts {
  deps: RunDeps;
  run: StartedRun;
  /** Emit one event under this execution (dropped once the run is no longer the owner). */
  emit: Emit;
}

/**
 * One execution of a claimed job, built once by `runJob` and passed whole to every step, which
 * takes what else it needs as named options. The identity has one home, the run (the heartbeat
 * reads it there); `id` reads it.
 */
export class Execution implements ExecutionParts {
  readonly deps: RunDeps;
  readonly run: StartedRun;
  readonly emit: Emit;
  /** The job's row as this execution read it, once (a later agent version never reaches it). */
  readonly job: RunnableJob;

  constructor(parts: ExecutionParts & { job: RunnableJob }) {
    this.deps = parts.deps;
    this.run = parts.run;
    this.emit = parts.emit;
    this.job = parts.job;
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
