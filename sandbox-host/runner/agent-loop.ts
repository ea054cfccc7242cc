/**
 * The agent between the started CAS and the terminal write: prepare (the job, its pinned agent
 * version, its model, its tools, input sent so far), then model turns (each behind the quota
 * gate, retried before output, model-call.ts) and tool steps until the model answers without
 * calling a tool, check the answer against the agent's response_format, and decide the outcome.
 * Input that arrives meanwhile is applied at turn boundaries.
 */
import { AGENT_LIMITS } from "../../src/contracts/agent";
import type { ToolName } from "../../src/contracts/job";
import { acceptPendingInputs, type FinalOutcome, markInputsApplied } from "../../src/db/ownership-repo";
import { loadRunnableJob, type RunnableJob } from "../../src/db/run-repo";
import type { ExecutionIdentity } from "../../src/domain/identity";
import { type ModelEntry, resolveModel } from "../../src/domain/models";
import { errorFields } from "../log";
import { ModelError, type ModelMessage, type ModelToolSpec } from "../model/types";
import { SANDBOX_TOOL_SPECS } from "../sandbox/tools";
import { callModel } from "./model-call";
import type { TurnRequest } from "./model-turn";
import { type AnswerFormat, answerFormat, repairMessage } from "./response-format";
import { type ActiveRun, abortedOutcome, type Emit, failed, type RunContext, runFields } from "./run-context";
import { runTool } from "./tool-step";

/** The turns a run of the built-in default agent may take (an agent sets its own `max_turns`). */
export const MAX_TURNS = AGENT_LIMITS.defaultMaxTurns;

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
    const { job, model, messages, tools, request, format } = prepared;
    let maxTurns = prepared.maxTurns;
    let repaired = false;

    for (let turn = 1; ; turn++) {
      const called = await callModel(
        ctx,
        run,
        id,
        { job, model, turn, request: { ...request, messages, tools }, textSoFar: text },
        emit,
        onFirstOutput,
      );
      if ("state" in called) return called;
      const { text: turnText, calls } = called;
      text = turnText;
      if (run.abort.signal.aborted) return abortedOutcome(run, text);

      if (calls.length > 0) {
        if (!tools) {
          const why = ctx.sandbox ? "this job allows no tools" : "this host has no sandbox (Docker) available";
          return failed("tools_unavailable", `the model called tool "${calls[0]?.name}" but ${why}`, text);
        }
        if (turn >= maxTurns) return failed("too_many_turns", `the agent used ${maxTurns} model turns`, text);
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
      messages.push({ role: "assistant", content: turnText });
      if (turn < maxTurns && (await applyInputs(ctx, id, messages, emit)) > 0) continue;
      if (!format) break;
      const checked = format.check(turnText);
      if (checked.ok) return { state: "completed", output: text, outputJson: checked.value };
      if (repaired) {
        return failed(
          "output_invalid",
          `the answer does not satisfy the agent's response_format, even after a repair turn: ${checked.problems}`,
          text,
        );
      }
      // One repair turn, on top of max_turns: the model is told what was wrong.
      repaired = true;
      maxTurns = turn + 1;
      messages.push({ role: "user", content: repairMessage(checked.problems) });
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

interface PreparedRun {
  job: RunnableJob;
  model: ModelEntry;
  messages: ModelMessage[];
  tools: ModelToolSpec[] | undefined;
  /** What every turn sends besides the messages and tools: the model, sampling, limits, format. */
  request: Omit<TurnRequest, "messages" | "tools">;
  maxTurns: number;
  format: AnswerFormat | null;
}

/**
/**
 * The run's context: its job row and pinned agent version (read once: a later version never
 * reaches a running job), the model it may use, the tools it allows (none without a sandbox),
 * the agent's instructions as the first (system) message, and input sent so far; then the
 * `prepared_at` fact (written with the next heartbeat or the terminal write) and `run.prepared`.
 * Without an agent the built-in default agent runs: the job's tools, no instructions, MAX_TURNS
 * turns, the provider's default sampling.
 */
async function prepare(
  ctx: RunContext,
  run: ActiveRun,
  id: ExecutionIdentity,
  emit: Emit,
): Promise<PreparedRun | FinalOutcome> {
  const job = await loadRunnableJob(ctx.db, id.jobId);
  const agent = job.agent?.definition ?? null;
  // The gateway accepts only offered models, but a row may predate the list or come from a
  // gateway configured differently: never hand the provider (or the quota) a name not offered.
  const requested = job.model ?? agent?.model ?? null;
  const model = resolveModel(ctx.models, requested);
  if (model === null) {
    return failed(
      "model_not_allowed",
      `model "${requested}" is not offered by this host (MODELS: ${ctx.models.entries.map((e) => e.name).join(", ")})`,
      "",
    );
  }
  const messages: ModelMessage[] = [
    ...(agent?.instructions ? [{ role: "system" as const, content: agent.instructions }] : []),
    ...job.messages,
  ];
  const allowed: readonly ToolName[] = agent ? agent.tools : job.tools;
  // In the order the agent (or job) lists them: what the provider sees is exactly that list.
  const tools =
    allowed.length > 0 && ctx.sandbox
      ? allowed.flatMap((name) => SANDBOX_TOOL_SPECS.filter((t) => t.name === name))
      : undefined;
  const format = agent?.response_format && job.agent ? answerFormat(job.agent.name, agent.response_format) : null;
  await applyInputs(ctx, id, messages, emit);
  run.observe("prepared_at");
  emit("run.prepared", {});
  return {
    job,
    model,
    messages,
    tools,
    request: {
      model: model.name,
      maxOutputTokens: agent?.limits.max_output_tokens ?? null,
      temperature: agent?.sampling.temperature ?? null,
      topP: agent?.sampling.top_p ?? null,
      responseFormat: format?.wire ?? null,
    },
    maxTurns: agent?.limits.max_turns ?? MAX_TURNS,
    format,
  };
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
