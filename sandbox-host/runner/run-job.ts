/**
 * One claimed job, start to terminal state (the text-only agent turn): started CAS, events,
 * timing facts, one streamed model turn, the fenced terminal write. Every write carries the
 * execution identity; the moment one misses (or a heartbeat says the row is no longer ours) the
 * run stops producing events under that identity. Events already produced keep being delivered.
 */
import { randomUUID } from "node:crypto";
import { and, eq } from "drizzle-orm";
import type { EventType } from "../../src/contracts/events";
import type { ChatMessage, JobError } from "../../src/contracts/job";
import type { Db } from "../../src/db/client";
import {
  acceptPendingInputs,
  cancelClaim,
  type ExecutionIdentity,
  type FinalOutcome,
  finishJob,
  markInputsApplied,
  markStarted,
  setTimingFact,
  type TimingPoint,
} from "../../src/db/ownership-repo";
import { jobs } from "../../src/db/schema";
import { deriveLatency } from "../../src/domain/timing";
import { errorFields, type Logger } from "../log";
import { type HostMetrics, observeRunPhases } from "../metrics";
import { type ModelClient, ModelError } from "../model/types";
import type { Outbox } from "../outbox";

export interface Claim {
  jobId: string;
  epoch: number;
  token: string;
}

export interface RunContext {
  db: Db;
  hostId: string;
  model: ModelClient;
  outbox: Outbox;
  log: Logger;
  /** Deltas arriving within this window become one `model.delta` event. */
  coalesceMs: number;
  /** Phase histograms, observed from the timing facts once the terminal write hit. */
  metrics?: Pick<HostMetrics, "runPhase">;
}

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

  if (!(await markStarted(db, id))) {
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
  const out = ctx.outbox.open({ jobId: id.jobId, executionId: id.executionId, epoch: id.epoch });
  const emit = (type: EventType, payload: Record<string, unknown>) => {
    if (run.owned) out.emit(type, payload);
  };

  try {
    emit("run.started", { host: ctx.hostId });
    const outcome = await streamTurn(ctx, run, id, emit);
    if (!run.owned) {
      log.warn("run lost ownership; stopped without a terminal event", fields);
      return "ownership_lost";
    }
    run.phase = "finishing";
    if (outcome.state === "cancelled") emit("cancel.accepted", { via: run.cancelledVia });
    let finished: boolean;
    try {
      finished = await finishJob(db, id, outcome);
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
    out.end();
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
    const messages: ChatMessage[] = [...job.messages];
    await applyInputs(ctx, id, messages, emit);
    await writeTimingFact(ctx, id, "prepared_at");
    emit("run.prepared", {});

    for (let turn = 1; ; turn++) {
      let turnText = "";
      for await (const chunk of ctx.model.streamTurn({
        messages,
        model: job.model ?? undefined,
        signal: run.abort.signal,
      })) {
        if (run.abort.signal.aborted) break;
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
          flushDelta();
          // Leaving the loop returns the iterator, which ends the provider request.
          return failed(
            "tools_unavailable",
            `the model called tool "${chunk.name}"; tools are not available yet`,
            text,
          );
        } else if (chunk.type === "done") {
          break;
        }
      }
      flushDelta();
      text = turnText;
      if (run.abort.signal.aborted) return abortedOutcome(run, text);
      // Input that arrived during the turn is applied in one more turn (bounded).
      if (turn >= MAX_TURNS) break;
      messages.push({ role: "assistant", content: turnText });
      if ((await applyInputs(ctx, id, messages, emit)) === 0) break;
    }
    return { state: "completed", output: text };
  } catch (err) {
    flushDelta();
    if (run.abort.signal.aborted) return abortedOutcome(run, text);
    if (err instanceof ModelError) return failed(err.code, err.message, text);
    ctx.log.error("run failed", { job_id: id.jobId, execution_id: id.executionId, ...errorFields(err) });
    return failed("internal_error", err instanceof Error ? err.message : String(err), text);
  } finally {
    clearTimeout(deltaTimer);
    await firstOutput;
  }
}

/**
 * Take input sent while the job was queued or running, in arrival order, into the next model
 * turn: accepted (event), appended as user messages, then marked applied. Returns how many.
 */
async function applyInputs(
  ctx: RunContext,
  id: ExecutionIdentity,
  messages: ChatMessage[],
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
  return run.abortReason === "host_shutdown"
    ? failed("host_shutdown", "the sandbox-host shut down before the run finished", text)
    : failed("aborted", "the run was aborted", text);
}

function failed(code: string, message: string, partialOutput: string): FinalOutcome {
  const error: JobError = { code, message };
  return { state: "failed", error, output: partialOutput || null };
}

async function loadJob(db: Db, jobId: string): Promise<{ messages: ChatMessage[]; model: string | null }> {
  const rows = await db.select({ input: jobs.input, model: jobs.model }).from(jobs).where(eq(jobs.id, jobId)).limit(1);
  const row = rows[0];
  if (!row) throw new Error(`job ${jobId} vanished after it was started`);
  return { messages: row.input.messages, model: row.model };
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
