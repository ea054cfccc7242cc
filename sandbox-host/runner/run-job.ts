/**
 * One claimed job, start to terminal state (the text-only agent turn): started CAS, events,
 * timing facts, one streamed model turn, the fenced terminal write. Every write carries the
 * execution identity; the moment one misses (or a heartbeat says the row is no longer ours) the
 * run stops producing events under that identity. Events already produced keep being delivered.
 */
import { randomUUID } from "node:crypto";
import { and, eq } from "drizzle-orm";
import type { JobErrorCode } from "../../src/contracts/errors";
import type { EventType } from "../../src/contracts/events";
import { type ChatMessage, type JobError, type ToolName, tenantJobError } from "../../src/contracts/job";
import type { Db } from "../../src/db/client";
import {
  acceptPendingInputs,
  cancelClaim,
  type ExecutionIdentity,
  type FinalOutcome,
  finishJobReporting,
  markInputsApplied,
  markStarted,
  setCleanupPending,
  setTimingFact,
  type TimingPoint,
} from "../../src/db/ownership-repo";
import { jobs } from "../../src/db/schema";
import { type ModelCatalog, type ModelEntry, resolveModel } from "../../src/domain/models";
import { deriveLatency } from "../../src/domain/timing";
import { quotaKeys } from "../../src/quota/keys";
import type { LeaseStore, QuotaDemand, QuotaLease } from "../../src/quota/lease-store";
import { acquireWithWait, type WaitOutcome } from "../../src/quota/wait";
import { errorFields, type Logger } from "../log";
import { type HostMetrics, observeRunPhases } from "../metrics";
import { type ModelClient, ModelError, type ModelMessage, type ModelToolCall } from "../model/types";
import type { Outbox } from "../outbox";
import { callSandboxTool, isRunFatal, SANDBOX_TOOL_SPECS, type SandboxManager, toolResultContent } from "../sandbox";

export interface Claim {
  jobId: string;
  epoch: number;
  token: string;
}

export interface RunContext {
  db: Db;
  hostId: string;
  /** The started CAS; the runner passes its group-committing batcher (default: one statement). */
  markStarted?: (id: ExecutionIdentity) => Promise<boolean>;
  model: ModelClient;
  outbox: Outbox;
  log: Logger;
  /** Deltas arriving within this window become one `model.delta` event. */
  coalesceMs: number;
  /** Phase histograms, observed from the timing facts once the terminal write hit. */
  metrics?: Pick<HostMetrics, "runPhase"> & Partial<Pick<HostMetrics, "cancelConvergence">>;
  /** Global model quota (named leases shared by every host); absent = no quota. */
  quota?: QuotaGate;
  /** Docker sandboxes for tool calls; absent = tool runs fail with tools_unavailable. */
  sandbox?: SandboxManager;
  /** The models jobs may run on, the default first; a job naming another one fails unrun. */
  models: ModelCatalog;
}

/** What a run needs from the quota: the store, the limits, and the host's renewal registry. */
export interface QuotaGate {
  store: LeaseStore;
  /** Slots per model across all hosts. */
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

export type RunPhase = "claimed" | "running" | "finishing" | "done";

/** Why a run stopped early, set by whoever aborts it. */
export type AbortReason = "ownership_lost" | "host_shutdown" | "cancelled" | "quota_lease_lost";

/** The state a run shares with the heartbeat loop and shutdown. */
export class ActiveRun {
  phase: RunPhase = "claimed";
  identity: ExecutionIdentity | null = null;
  /** False once we know we are not the owner: nothing more is emitted under this identity. */
  owned = true;
  abortReason: AbortReason | null = null;
  readonly abort = new AbortController();

  constructor(readonly claim: Claim) {}

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
  /** A sandbox may exist for this run: it must be destroyed at the end, inside the cleanup fence. */
  sandboxUsed = false;

  /** The lease is gone (a renewal found it purged, or it ran past its local deadline): no further model call. */
  loseLease(): void {
    this.abortReason ??= "quota_lease_lost";
    this.abort.abort(new Error("quota lease lost"));
  }

  /** Shutdown grace ran out: stop the model stream and fail the run honestly. */
  stopForShutdown(): void {
    this.abortReason ??= "host_shutdown";
    this.abort.abort(new Error("host shutting down"));
  }
}

export type RunResult =
  | "not_started"
  | "cancelled_before_start"
  | "completed"
  | "failed"
  | "cancelled"
  | "ownership_lost"
  | "finish_error";

/** An agent run applies late input at turn boundaries; this bounds the turns one run may take. */
const MAX_TURNS = 8;

const MAX_DELTA_CHARS = 4096;

export async function runJob(ctx: RunContext, run: ActiveRun): Promise<RunResult> {
  const { db, log } = ctx;
  const id: ExecutionIdentity = { ...run.claim, host: ctx.hostId, executionId: randomUUID() };
  const fields = { job_id: id.jobId, execution_id: id.executionId, epoch: id.epoch };

  if (!(await (ctx.markStarted ?? ((x) => markStarted(db, x)))(id))) {
    // Cancelled before it started: end it with our claim identity. Otherwise someone else owns
    // it now (claim released and re-claimed): not ours to run.
    if (await cancelClaim(db, id).catch(() => false)) {
      log.info("cancel requested before start; job cancelled", fields);
      return "cancelled_before_start";
    }
    log.info("start CAS missed; dropping the claim", fields);
    return "not_started";
  }
  run.identity = id;
  run.phase = "running";
  const out = ctx.outbox.open({ jobId: id.jobId, executionId: id.executionId, epoch: id.epoch, token: id.token });
  const emit = (type: EventType, payload: Record<string, unknown>) => {
    if (run.owned) out.emit(type, payload);
  };

  try {
    // No host id: which machine ran a job is the operator's business (it is in the host's log).
    emit("run.started", {});
    const outcome = await streamTurn(ctx, run, id, emit);
    if (!run.owned) {
      log.warn("run lost ownership; stopped without a terminal event", fields);
      return "ownership_lost";
    }
    run.phase = "finishing";
    if (outcome.state === "cancelled") emit("cancel.accepted", { via: run.cancelledVia });
    let finished: boolean;
    try {
      const written = await finishJobReporting(db, id, outcome);
      finished = written.written;
      if (finished && written.cancelLagSeconds !== null) {
        ctx.metrics?.cancelConvergence?.observe({ outcome: outcome.state }, written.cancelLagSeconds);
      }
    } catch (err) {
      // The reaper will mark the run lost; the projector learns the terminal state from Postgres.
      log.error("terminal write failed", { ...fields, ...errorFields(err) });
      return "finish_error";
    }
    if (!finished) {
      run.owned = false;
      log.warn("terminal write missed: no longer the owner; emitting nothing further", fields);
      return "ownership_lost";
    }
    if (outcome.state === "completed") emit("run.completed", { output: outcome.output });
    else if (outcome.state === "failed") emit("run.failed", { error: outcome.error });
    else emit("run.cancelled", { output: outcome.output ?? null });
    await observePhases(ctx, id);
    return outcome.state;
  } finally {
    run.phase = "done";
    if (run.sandboxUsed && ctx.sandbox) await destroySandbox(ctx, id);
    out.end();
  }
}

/** The run's terminal state is written: remove its sandbox, then clear the fence on the row. */
async function destroySandbox(ctx: RunContext, id: ExecutionIdentity): Promise<void> {
  try {
    await ctx.sandbox?.destroy(id.executionId);
    await setCleanupPending(ctx.db, id, false);
  } catch (err) {
    // The fence stays set; orphan removal at the next host start finishes the job.
    ctx.log.error("sandbox cleanup failed", { job_id: id.jobId, execution_id: id.executionId, ...errorFields(err) });
  }
}

/** Prepare, stream one model turn, and decide the outcome. Never throws. */
async function streamTurn(
  ctx: RunContext,
  run: ActiveRun,
  id: ExecutionIdentity,
  emit: (type: EventType, payload: Record<string, unknown>) => void,
): Promise<FinalOutcome> {
  let text = "";
  let pendingDelta = "";
  let deltaTimer: NodeJS.Timeout | undefined;
  const flushDelta = () => {
    clearTimeout(deltaTimer);
    deltaTimer = undefined;
    if (pendingDelta) emit("model.delta", { text: pendingDelta });
    pendingDelta = "";
  };
  let firstOutput: Promise<void> | null = null;

  try {
    const job = await loadJob(ctx.db, id.jobId);
    // The gateway accepts only offered models, but a row may predate the list or come from a
    // gateway configured differently: never hand the provider (or the quota) a name not offered.
    const model = resolveModel(ctx.models, job.model);
    if (model === null) {
      return failed(
        "model_not_allowed",
        `model "${job.model}" is not offered by this host (MODELS: ${ctx.models.entries.map((e) => e.name).join(", ")})`,
        "",
      );
    }
    const messages: ModelMessage[] = [...job.messages];
    const tools =
      job.tools.length > 0 && ctx.sandbox
        ? SANDBOX_TOOL_SPECS.filter((t) => job.tools.includes(t.name as ToolName))
        : undefined;
    await applyInputs(ctx, id, messages, emit);
    await writeTimingFact(ctx, id, "prepared_at");
    emit("run.prepared", {});

    for (let turn = 1; ; turn++) {
      const admitted = await acquireQuota(ctx, run, id, job, model, turn, emit);
      if ("state" in admitted) return admitted;
      const lease = admitted.lease;
      let turnText = "";
      const calls: ModelToolCall[] = [];
      try {
        // Checked before the call and at every chunk: a holder paused past its lease (SIGSTOP, a
        // stalled loop) wakes with its data and its timers due at once, and its renewal would
        // learn of the loss only a round trip later, after the run had carried on (docs/quota.md).
        const chunks = leaseRanOut(ctx, run, id, lease)
          ? []
          : ctx.model.streamTurn({ messages, model: job.model ?? undefined, tools, signal: run.abort.signal });
        for await (const chunk of chunks) {
          if (run.abort.signal.aborted || leaseRanOut(ctx, run, id, lease)) break;
          if (chunk.type === "text") {
            if (!chunk.text) continue;
            // Not awaited here so the stream keeps flowing; awaited before the terminal write,
            // which would otherwise make the fenced timing write miss (state no longer running).
            firstOutput ??= writeTimingFact(ctx, id, "first_output_at");
            turnText += chunk.text;
            pendingDelta += chunk.text;
            if (pendingDelta.length >= MAX_DELTA_CHARS) flushDelta();
            else deltaTimer ??= setTimeout(flushDelta, ctx.coalesceMs);
          } else if (chunk.type === "tool_call") {
            firstOutput ??= writeTimingFact(ctx, id, "first_output_at");
            calls.push({ id: chunk.id, name: chunk.name, args: chunk.args });
          } else if (chunk.type === "done") {
            break;
          }
        }
      } finally {
        if (lease) {
          ctx.quota?.untrack(lease);
          await ctx.quota?.store.release(lease);
        }
      }
      flushDelta();
      text = turnText;
      if (run.abort.signal.aborted) return abortedOutcome(run, text);

      if (calls.length > 0) {
        if (!tools) {
          const why = ctx.sandbox ? "this job allows no tools" : "this host has no sandbox (Docker) available";
          return failed("tools_unavailable", `the model called tool "${calls[0]?.name}" but ${why}`, text);
        }
        if (turn >= MAX_TURNS) return failed("too_many_turns", `the agent used ${MAX_TURNS} model turns`, text);
        messages.push({ role: "assistant", content: turnText, toolCalls: calls });
        for (const call of calls) {
          const result = await runTool(ctx, run, id, call, emit);
          if ("state" in result) return result;
          messages.push({ role: "tool", toolCallId: call.id, content: result.content });
          if (run.abort.signal.aborted) return abortedOutcome(run, text);
        }
        continue;
      }
      // Input that arrived during the turn is applied in one more turn (bounded).
      if (turn >= MAX_TURNS) break;
      messages.push({ role: "assistant", content: turnText });
      if ((await applyInputs(ctx, id, messages, emit)) === 0) break;
    }
    return { state: "completed", output: text };
  } catch (err) {
    flushDelta();
    if (run.abort.signal.aborted) return abortedOutcome(run, text);
    // The detail goes to this log only: failed() shows the tenant a generic message for internal codes.
    if (err instanceof ModelError) {
      ctx.log.warn("model call failed", { job_id: id.jobId, execution_id: id.executionId, ...errorFields(err) });
      return failed(err.code, err.message, text);
    }
    ctx.log.error("run failed", { job_id: id.jobId, execution_id: id.executionId, ...errorFields(err) });
    return failed("internal_error", err instanceof Error ? err.message : String(err), text);
  } finally {
    clearTimeout(deltaTimer);
    await firstOutput;
  }
}

interface LoadedJob {
  messages: ChatMessage[];
  model: string | null;
  tools: ToolName[];
  tenantId: string;
}

/**
 * A quota lease for one model turn (holder = execution id + turn, so a late release of an
 * earlier turn can never free this one). Waiting is bounded and visible as `quota.waiting`.
 */
async function acquireQuota(
  ctx: RunContext,
  run: ActiveRun,
  id: ExecutionIdentity,
  job: LoadedJob,
  model: ModelEntry,
  turn: number,
  emit: (type: EventType, payload: Record<string, unknown>) => void,
): Promise<{ lease: QuotaLease | null } | FinalOutcome> {
  const q = ctx.quota;
  if (!q || q.modelLimit <= 0) return { lease: null };
  // Keyed by the resolved model: a client cannot mint buckets of its own by naming models.
  const demands: QuotaDemand[] = [{ key: quotaKeys.model(model.name), limit: q.modelLimit }];
  if (q.tenantLimit > 0) demands.push({ key: quotaKeys.tenant(job.tenantId), limit: q.tenantLimit });
  const outcome = await acquireWithWait(q.store, {
    holder: `${id.executionId}:${turn}`,
    demands,
    maxWaitMs: q.maxWaitMs,
    signal: run.abort.signal,
    onWaiting: (info) =>
      emit("quota.waiting", { reason: info.reason, key: info.key ?? null, ahead: info.ahead ?? null }),
  });
  q.onWait?.(outcome);
  if (outcome.kind === "aborted") return abortedOutcome(run, "");
  if (outcome.kind === "timed_out") {
    return failed(
      "quota_unavailable",
      outcome.reason === "redis_unavailable"
        ? "the model quota could not be checked (Redis unavailable) within the wait limit"
        : `no model quota slot became free within ${Math.round(outcome.waitedMs)} ms`,
      "",
    );
  }
  q.track(outcome.lease, () => run.loseLease());
  return { lease: outcome.lease };
}

/**
 * The holder-side rule of a lease (lease-store.ts): usable only while `isValid`. Past its local
 * deadline the lease is lost whatever Redis would say: stop the run's model calls, as a renewal
 * that found it gone would.
 */
function leaseRanOut(ctx: RunContext, run: ActiveRun, id: ExecutionIdentity, lease: QuotaLease | null): boolean {
  if (!lease || !ctx.quota || ctx.quota.store.isValid(lease)) return false;
  ctx.log.warn("quota lease ran out before it was renewed; stopping the run's model calls", {
    job_id: id.jobId,
    execution_id: id.executionId,
    holder: lease.holder,
  });
  run.loseLease();
  return true;
}

/** One tool call in the run's sandbox (created lazily by the first call), with its events. */
async function runTool(
  ctx: RunContext,
  run: ActiveRun,
  id: ExecutionIdentity,
  call: ModelToolCall,
  emit: (type: EventType, payload: Record<string, unknown>) => void,
): Promise<{ content: string } | FinalOutcome> {
  const sandbox = ctx.sandbox as SandboxManager;
  emit("tool.call", { id: call.id, name: call.name, args: call.args });
  if (!run.sandboxUsed) {
    // The fence goes on the row before anything exists to clean up.
    if (!(await setCleanupPending(ctx.db, id, true))) {
      run.owned = false;
      return failed("ownership_lost", "the run is no longer the owner", "");
    }
    run.sandboxUsed = true;
  }
  const hadSandbox = sandbox.active().some((s) => s.runId === id.executionId);
  try {
    const result = await callSandboxTool(sandbox, id.executionId, call.name, call.args, run.abort.signal);
    if (!hadSandbox) emit("sandbox.created", {});
    emit("tool.result", { id: call.id, ok: result.ok, output: result.ok ? result.output : result.error });
    return { content: toolResultContent(result) };
  } catch (err) {
    // Creation or engine failure: an explicit run error, never a fallback to the host.
    const message = err instanceof Error ? err.message : String(err);
    const fatal = isRunFatal(err);
    ctx.log.warn("sandbox tool call failed", { job_id: id.jobId, execution_id: id.executionId, ...errorFields(err) });
    // An infrastructure failure's text is the engine's (generic for the tenant); the model's own
    // mistakes (a path outside the workspace, …) keep their explanation.
    const output: JobError = { code: "sandbox_error", message };
    emit("tool.result", { id: call.id, ok: false, output: fatal ? tenantJobError(output) : output });
    return failed(fatal ? "sandbox_error" : "tool_error", message, "");
  }
}

/**
 * Take input sent while the job was queued or running, in arrival order, into the next model
 * turn: accepted (event), appended as user messages, then marked applied. Returns how many.
 */
async function applyInputs(
  ctx: RunContext,
  id: ExecutionIdentity,
  messages: ModelMessage[],
  emit: (type: EventType, payload: Record<string, unknown>) => void,
): Promise<number> {
  const inputs = await acceptPendingInputs(ctx.db, id);
  if (inputs.length === 0) return 0;
  for (const input of inputs) {
    emit("input.accepted", { input_id: input.id, content: input.content });
    messages.push({ role: "user", content: input.content });
  }
  await markInputsApplied(
    ctx.db,
    id,
    inputs.map((i) => i.id),
  );
  return inputs.length;
}

function abortedOutcome(run: ActiveRun, text: string): FinalOutcome {
  if (run.abortReason === "cancelled") return { state: "cancelled", output: text || null };
  if (run.abortReason === "quota_lease_lost") {
    return failed(
      "quota_lease_lost",
      "the model quota lease was lost (renewal found it gone); no further model calls",
      text,
    );
  }
  return run.abortReason === "host_shutdown"
    ? failed("host_shutdown", "the sandbox-host shut down before the run finished", text)
    : failed("aborted", "the run was aborted", text);
}

function failed(code: JobErrorCode, message: string, partialOutput: string): FinalOutcome {
  // The one place a run's error is made: the row and the run.failed event both carry this.
  const error: JobError = tenantJobError({ code, message });
  return { state: "failed", error, output: partialOutput || null };
}

async function loadJob(db: Db, jobId: string): Promise<LoadedJob> {
  const rows = await db
    .select({ input: jobs.input, model: jobs.model, tools: jobs.tools, tenantId: jobs.tenantId })
    .from(jobs)
    .where(eq(jobs.id, jobId))
    .limit(1);
  const row = rows[0];
  if (!row) throw new Error(`job ${jobId} vanished after it was started`);
  return { messages: row.input.messages, model: row.model, tools: row.tools, tenantId: row.tenantId };
}

/** Phase histograms from the same five timestamps the API serializes (one PK read). Never throws. */
async function observePhases(ctx: RunContext, id: ExecutionIdentity): Promise<void> {
  if (!ctx.metrics) return;
  try {
    const rows = await ctx.db
      .select({
        created_at: jobs.createdAt,
        started_at: jobs.startedAt,
        prepared_at: jobs.preparedAt,
        first_output_at: jobs.firstOutputAt,
        finished_at: jobs.finishedAt,
      })
      .from(jobs)
      .where(and(eq(jobs.id, id.jobId), eq(jobs.executionId, id.executionId)))
      .limit(1);
    if (rows[0]) observeRunPhases(ctx.metrics, deriveLatency(rows[0]));
  } catch (err) {
    ctx.log.warn("phase metrics not observed", { job_id: id.jobId, execution_id: id.executionId, ...errorFields(err) });
  }
}

/** A failed timing write logs a warning and never fails the run. */
async function writeTimingFact(ctx: RunContext, id: ExecutionIdentity, point: TimingPoint): Promise<void> {
  try {
    const ok = await setTimingFact(ctx.db, id, point);
    if (!ok) ctx.log.warn("timing fact not written", { job_id: id.jobId, execution_id: id.executionId, point });
  } catch (err) {
    ctx.log.warn("timing fact write failed", {
      job_id: id.jobId,
      execution_id: id.executionId,
      point,
      ...errorFields(err),
    });
  }
}
