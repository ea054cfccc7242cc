/**
 * The agent between the started CAS and the terminal write: prepare (the job, its model, its
 * tools, input sent so far), then model turns (each behind the quota gate) and tool steps until
 * the model answers without calling a tool, and decide the outcome. Input that arrives meanwhile
 * is applied at turn boundaries.
 */
import type { ToolName } from "../../src/contracts/job";
import { acceptPendingInputs, type FinalOutcome, markInputsApplied } from "../../src/db/ownership-repo";
import { loadRunnableJob, type RunnableJob } from "../../src/db/run-repo";
import type { ExecutionIdentity } from "../../src/domain/identity";
import { type ModelEntry, resolveModel } from "../../src/domain/models";
import { errorFields } from "../log";
import { ModelError, type ModelMessage, type ModelToolSpec } from "../model/types";
import { SANDBOX_TOOL_SPECS } from "../sandbox/tools";
import { streamModelTurn } from "./model-turn";
import { acquireQuota } from "./quota-gate";
import { type ActiveRun, abortedOutcome, type Emit, failed, type RunContext, runFields } from "./run-context";
import { runTool } from "./tool-step";

/** An agent run applies late input at turn boundaries; this bounds the turns one run may take. */
export const MAX_TURNS = 8;

/** Prepare, run the turns, and decide the outcome. Never throws. */
export async function runAgent(
  ctx: RunContext,
  run: ActiveRun,
  id: ExecutionIdentity,
  emit: Emit,
): Promise<FinalOutcome> {
  let text = "";
  // No statement of its own: the fact rides on the next heartbeat or the terminal write.
  const onFirstOutput = () => run.observe("first_output_at");

  try {
    const prepared = await prepare(ctx, run, id, emit);
    if ("state" in prepared) return prepared;
    const { job, model, messages, tools } = prepared;

    for (let turn = 1; ; turn++) {
      const admitted = await acquireQuota(ctx, run, id, job, model, turn, emit);
      if ("state" in admitted) return admitted;
      const request = { messages, model: job.model ?? undefined, tools };
      const { text: turnText, calls } = await streamModelTurn(
        ctx,
        run,
        id,
        request,
        admitted.lease,
        emit,
        onFirstOutput,
      );
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
    if (run.abort.signal.aborted) return abortedOutcome(run, text);
    // The detail goes to this log only: failed() shows the tenant a generic message for internal codes.
    if (err instanceof ModelError) {
      ctx.log.warn("model call failed", { ...runFields(id), ...errorFields(err) });
      return failed(err.code, err.message, text);
    }
    ctx.log.error("run failed", { ...runFields(id), ...errorFields(err) });
    return failed("internal_error", err instanceof Error ? err.message : String(err), text);
  }
}

/**
 * The run's context: its job row, the model it may use, the tools it allows (none without a
 * sandbox), and input sent so far; then the `prepared_at` fact (written with the next heartbeat
 * or the terminal write) and `run.prepared`.
 */
async function prepare(
  ctx: RunContext,
  run: ActiveRun,
  id: ExecutionIdentity,
  emit: Emit,
): Promise<
  { job: RunnableJob; model: ModelEntry; messages: ModelMessage[]; tools: ModelToolSpec[] | undefined } | FinalOutcome
> {
  const job = await loadRunnableJob(ctx.db, id.jobId);
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
  run.observe("prepared_at");
  emit("run.prepared", {});
  return { job, model, messages, tools };
}

/**
 * Take input sent while the job was queued or running, in arrival order, into the next model
 * turn: accepted (event), appended as user messages, then marked applied. Returns how many.
 */
async function applyInputs(
  ctx: RunContext,
  id: ExecutionIdentity,
  messages: ModelMessage[],
  emit: Emit,
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
