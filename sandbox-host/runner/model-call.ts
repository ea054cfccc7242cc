/**
 * One model turn as a careful client makes it: behind the quota gate, retried when it failed
 * before producing output (model-retry.ts decides whether and how long to wait; each retry is a
 * `model.retry` event and the turn's quota slot is given back for the wait), and each call's
 * tokens recorded the moment it ends.
 */
import { setTimeout as sleep } from "node:timers/promises";
import type { FinalOutcome } from "../../src/db/ownership-repo";
import { type RunnableJob, recordModelUsage } from "../../src/db/run-repo";
import type { ExecutionIdentity } from "../../src/domain/identity";
import type { ModelEntry } from "../../src/domain/models";
import { errorFields } from "../log";
import type { ModelToolCall, ModelUsage } from "../model/types";
import { retryDelayMs } from "./model-retry";
import { streamModelTurn, type TurnRequest } from "./model-turn";
import { acquireQuota } from "./quota-gate";
import { type ActiveRun, abortedOutcome, type Emit, failed, type RunContext, runFields } from "./run-context";

/**
 * Characters per token for an estimate when the provider reports no usage: OpenAI's rule of
 * thumb for English text ("~4 characters per token"). Rough by design; the row says `estimated`.
 */
export const CHARS_PER_TOKEN = 4;

/** The run's turn: its number, its request, and the run's answer so far (the outcome's partial output if it ends here). */
export interface ModelCallInput {
  job: RunnableJob;
  model: ModelEntry;
  turn: number;
  request: TurnRequest;
  textSoFar: string;
}

export async function callModel(
  ctx: RunContext,
  run: ActiveRun,
  id: ExecutionIdentity,
  input: ModelCallInput,
  emit: Emit,
  onFirstOutput: () => void,
): Promise<{ text: string; calls: ModelToolCall[] } | FinalOutcome> {
  const { job, model, turn, request, textSoFar } = input;
  const began = performance.now();
  for (let attempt = 1; ; attempt++) {
    // A retry is a new lease (its own holder): the slot was given back for the wait.
    const admitted = await acquireQuota(ctx, run, id, job, model, attempt === 1 ? turn : `${turn}.${attempt}`, emit);
    if ("state" in admitted) return admitted;
    const result = await streamModelTurn(ctx, run, id, request, admitted.lease, emit, onFirstOutput);
    // A call that produced output (or finished) was served, and the provider counts it: so do we.
    if (result.ok || result.outputStarted) {
      await recordUsage(ctx, id, job, model, request, result.text, result.calls, result.ok ? result.usage : undefined);
    }
    if (result.ok) {
      countCall(ctx, model, run.abort.signal.aborted ? "aborted" : "ok");
      return { text: result.text, calls: result.calls };
    }
    if (run.abort.signal.aborted) {
      countCall(ctx, model, "aborted");
      return abortedOutcome(run, result.text || textSoFar);
    }
    const err = result.error;
    ctx.log.warn("model call failed", { ...runFields(id), attempt, ...errorFields(err) });
    if (result.outputStarted) {
      // Retrying would stream the answer again after the tenant saw its beginning.
      countCall(ctx, model, "failed");
      return failed(
        "provider_error",
        `the model provider's stream broke after output had started (${err.message}); not retried, so no output is repeated`,
        result.text,
      );
    }
    const delay = retryDelayMs(ctx.retry, attempt, err, performance.now() - began);
    if (delay === null) {
      countCall(ctx, model, "failed");
      return failed(err.code, err.message, textSoFar);
    }
    countCall(ctx, model, "retried");
    ctx.metrics?.modelRetries?.inc({ model: model.name, reason: err.code });
    ctx.metrics?.modelRetryDelay?.observe(delay / 1000);
    emit("model.retry", { attempt, delay_ms: delay, reason: err.code, status: err.status });
    try {
      await sleep(delay, undefined, { signal: run.abort.signal });
    } catch {
      // Cancelled (or shut down) during the wait: end now, not after it.
      return abortedOutcome(run, textSoFar);
    }
  }
}

function countCall(ctx: RunContext, model: ModelEntry, outcome: "ok" | "retried" | "failed" | "aborted"): void {
  ctx.metrics?.modelCalls?.inc({ model: model.name, outcome });
}

/**
 * Record one call's tokens (model_usage row + the job's sums, one statement) and count them. A
 * failed write is logged and the run goes on: usage must not fail the tenant's job.
 */
async function recordUsage(
  ctx: RunContext,
  id: ExecutionIdentity,
  job: RunnableJob,
  model: ModelEntry,
  request: TurnRequest,
  text: string,
  calls: ModelToolCall[],
  reported: ModelUsage | undefined,
): Promise<void> {
  const usage = reported ?? estimateUsage(request, text, calls);
  const estimated = reported === undefined;
  const labels = { model: model.name, estimated: String(estimated) };
  ctx.metrics?.modelTokens?.inc({ ...labels, kind: "prompt" }, usage.promptTokens);
  ctx.metrics?.modelTokens?.inc({ ...labels, kind: "completion" }, usage.completionTokens);
  try {
    await recordModelUsage(ctx.db, id, { tenantId: job.tenantId, model: model.name, ...usage, estimated });
  } catch (err) {
    ctx.log.warn("model usage not recorded", { ...runFields(id), ...usage, estimated, ...errorFields(err) });
  }
}

/**
 * Tokens estimated from characters (CHARS_PER_TOKEN) when the provider sent no usage: the
 * prompt is every message's text plus the tool specs as sent, the completion the reply's text
 * plus its tool calls' names and arguments. At least one token each for a call that happened.
 */
export function estimateUsage(request: TurnRequest, text: string, calls: ModelToolCall[]): ModelUsage {
  let promptChars = 0;
  for (const m of request.messages) {
    promptChars += m.content.length;
    if ("toolCalls" in m) promptChars += JSON.stringify(m.toolCalls).length;
  }
  if (request.tools?.length) promptChars += JSON.stringify(request.tools).length;
  let completionChars = text.length;
  for (const c of calls) completionChars += c.name.length + JSON.stringify(c.args ?? {}).length;
  return {
    promptTokens: Math.max(1, Math.ceil(promptChars / CHARS_PER_TOKEN)),
    completionTokens: Math.max(1, Math.ceil(completionChars / CHARS_PER_TOKEN)),
  };
}
