/**
 * One claimed job, start to terminal state (the text-only agent turn): started CAS, events,
 * timing facts, one streamed model turn, the fenced terminal write. Every write carries the
 * execution identity; the moment one misses (or a heartbeat says the row is no longer ours) the
 * run stops producing events under that identity. Events already produced keep being delivered.
 */
import { randomUUID } from "node:crypto";
import { eq } from "drizzle-orm";
import type { EventType } from "../../src/contracts/events";
import type { ChatMessage, JobError } from "../../src/contracts/job";
import type { Db } from "../../src/db/client";
import {
  type ExecutionIdentity,
  type FinalOutcome,
  finishJob,
  markStarted,
  setTimingFact,
  type TimingPoint,
} from "../../src/db/ownership-repo";
import { jobs } from "../../src/db/schema";
import { errorFields, type Logger } from "../log";
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
}

export type RunPhase = "claimed" | "running" | "finishing" | "done";

/** Why a run stopped early, set by whoever aborts it. */
export type AbortReason = "ownership_lost" | "host_shutdown";

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

  /** Shutdown grace ran out: stop the model stream and fail the run honestly. */
  stopForShutdown(): void {
    this.abortReason ??= "host_shutdown";
    this.abort.abort(new Error("host shutting down"));
  }
}

export type RunResult = "not_started" | "completed" | "failed" | "ownership_lost" | "finish_error";

const MAX_DELTA_CHARS = 4096;

export async function runJob(ctx: RunContext, run: ActiveRun): Promise<RunResult> {
  const { db, log } = ctx;
  const id: ExecutionIdentity = { ...run.claim, host: ctx.hostId, executionId: randomUUID() };
  const fields = { job_id: id.jobId, execution_id: id.executionId, epoch: id.epoch };

  if (!(await markStarted(db, id))) {
    // Someone else owns it now (claim released and re-claimed, or cancelled): not ours to run.
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
    return outcome.state === "completed" ? "completed" : "failed";
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
    await writeTimingFact(ctx, id, "prepared_at");
    emit("run.prepared", {});

    for await (const chunk of ctx.model.streamTurn({
      messages: job.messages,
      model: job.model ?? undefined,
      signal: run.abort.signal,
    })) {
      if (run.abort.signal.aborted) break;
      if (chunk.type === "text") {
        if (!chunk.text) continue;
        // Not awaited here so the stream keeps flowing; awaited before the terminal write,
        // which would otherwise make the fenced timing write miss (state no longer running).
        firstOutput ??= writeTimingFact(ctx, id, "first_output_at");
        text += chunk.text;
        pendingDelta += chunk.text;
        if (pendingDelta.length >= MAX_DELTA_CHARS) flushDelta();
        else deltaTimer ??= setTimeout(flushDelta, ctx.coalesceMs);
      } else if (chunk.type === "tool_call") {
        firstOutput ??= writeTimingFact(ctx, id, "first_output_at");
        flushDelta();
        // Leaving the loop returns the iterator, which ends the provider request.
        return failed("tools_unavailable", `the model called tool "${chunk.name}"; tools are not available yet`, text);
      } else if (chunk.type === "done") {
        break;
      }
    }
    flushDelta();
    if (run.abort.signal.aborted) return abortedOutcome(run, text);
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

function abortedOutcome(run: ActiveRun, text: string): FinalOutcome {
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
