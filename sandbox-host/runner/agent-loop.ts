/**
 * The agent between the started CAS and the terminal write: read the row (the job, its pinned
 * agent version, a resumed run's checkpoint and journal), prepare (its model, its tools, input sent so
 * far), then model turns (each behind the quota gate, retried before output, model-call.ts)
 * and tool steps until the model answers without calling a tool, check the answer against the
 * agent's response_format, and decide the outcome. Input that arrives meanwhile is applied at
 * turn boundaries. A tool call that needs a person (an approval, or ask_user) ends the
 * execution as a wait (waitpoint.ts). Every completed step is journaled before the next starts
 * (journal.ts), so the execution that resumes the job after its wait, or recovers it after its
 * host was lost (recovery.ts), rebuilds the conversation from the journal and continues there.
 */
import { AGENT_LIMITS, agentModels } from "../../src/contracts/agent";
import type { ModelTurnReason } from "../../src/contracts/events";
import { acceptPendingInputs, type FinalOutcome, markInputsApplied } from "../../src/db/ownership-repo";
import { loadRunnableJob } from "../../src/db/run-repo";
import { type ResumeDecision, resumeDecision } from "../../src/db/wait-repo";
import { approvalSettings, isIdempotent, requiresApproval } from "../../src/domain/approval";
import { mcpServersOf } from "../../src/domain/mcp";
import { type ModelEntry, resolveModel } from "../../src/domain/models";
import { errorFields } from "../log";
import { MCP_DISABLED } from "../mcp/mcp-config";
import { McpToolset } from "../mcp/toolset";
import { ModelError, type ModelMessage, type ModelToolCall, type ModelToolSpec } from "../model/types";
import { SANDBOX_TOOL_SPECS } from "../sandbox/tools";
import { codeToolSpec } from "./code-tool-step";
import { childResults, delegateSpecs, delegateTarget, planChildren } from "./delegate";
import { type Rebuilt, rebuildFromJournal, type Step } from "./journal";
import { callModel } from "./model-call";
import type { TurnRequest } from "./model-turn";
import {
  beginRecovery,
  FORK_OUTCOME_UNKNOWN,
  FORK_SANDBOX_NOTE,
  forkedPayload,
  OUTCOME_UNKNOWN,
  OUTCOME_UNKNOWN_NOTE,
  openCalls,
  type Recovery,
  recoveredPayload,
  SANDBOX_RESET_NOTE,
} from "./recovery";
import { type AnswerFormat, answerFormat, repairMessage } from "./response-format";
import { abortedOutcome, type Execution, failed } from "./run-context";
import { allowedTools, codeToolNames, runTool, unofferedCall } from "./tool-step";
import { ASK_USER_SPEC, decidedCallResult, type RunCheckpoint, readCheckpoint, type WaitOutcome } from "./waitpoint";
import { keepsConversationWorkspace, snapshotWorkspace } from "./workspace";

type TurnStep = Extract<Step, { kind: "turn" }>;

/** The turns a run of the built-in default agent may take (an agent sets its own `max_turns`). */
export const MAX_TURNS = AGENT_LIMITS.defaultMaxTurns;

/**
 * How the wait a resuming execution continues from ended: its checkpoint (the call that waited),
 * the journal it continues from, and the decision.
 */
export type Resume = {
  checkpoint: RunCheckpoint;
  rebuilt: Rebuilt;
  decision: { callId: string; decision: ResumeDecision };
};

/** Where an execution starts: afresh, from a wait's checkpoint, or from the journal. */
export interface Start {
  resume: Resume | null;
  recovery: Recovery | null;
}

/**
 * The execution's first step: its job row and pinned agent version (read once: a later version
 * never reaches a running job) and, when it resumes a waiting job, its checkpoint, how the wait
 * ended and the journal, or, when it recovers a job whose last owner was lost, the journal. Then
 * the execution's first event: `run.recovered` when it recovers, `run.resumed` when it resumes,
 * else `run.started`; none when it could not tell which (the row or the journal unread).
 * The row goes into the execution (`exec.job` from here on). Throws when it failed.
 */
export async function readRow(exec: Execution): Promise<Start> {
  const { deps, emit, id, run } = exec;
  let resume: Resume | null = null;
  let recovery: Recovery | null = null;
  let fresh = false;
  try {
    const job = await loadRunnableJob(deps.db, id.jobId);
    exec.rowRead(job);
    fresh = job.recoveryReason === null && job.checkpoint === null;
    if (job.recoveryReason !== null) {
      // A recovery: the journal holds everything the checkpoint would (decisions included).
      recovery = await beginRecovery(exec, job.recoveryReason);
      return { resume, recovery };
    }
    const checkpoint = readCheckpoint(job.checkpoint);
    if (checkpoint) {
      // A resume: the checkpoint names the call, the journal holds the conversation up to it.
      const [decision, records] = await Promise.all([
        resumeDecision(deps.db, id.jobId, checkpoint.callId),
        deps.journal.read(id.jobId),
      ]);
      if (!decision) throw new Error(`job ${id.jobId} was resumed with no decision on call ${checkpoint.callId}`);
      const rebuilt = rebuildFromJournal(records);
      // A budget wait is before a turn: the journal ends at the last one, no call open.
      const atWait = checkpoint.budget ? rebuilt.open.length === 0 : rebuilt.open[0]?.call.id === checkpoint.callId;
      if (rebuilt.turn !== checkpoint.turn || !atWait) {
        throw new Error(
          `job ${id.jobId}'s journal does not end at the call it waited on (${checkpoint.callId}, turn ${checkpoint.turn})`,
        );
      }
      resume = { checkpoint, rebuilt, decision: { callId: checkpoint.callId, decision } };
      // The workspace the run had when it suspended, unpacked before its first tool call.
      run.pendingRestore = rebuilt.snapshot;
    }
    return { resume, recovery };
  } finally {
    if (recovery?.forkedFrom) {
      emit("run.forked", forkedPayload(recovery.forkedFrom));
    } else if (recovery) {
      emit("run.recovered", recoveredPayload(recovery));
    } else if (resume) {
      const d = resume.decision.decision;
      emit("run.resumed", {
        call_id: resume.decision.callId,
        decision: d.decision,
        by: d.decidedBy,
        waited_ms: d.waitedMs,
      });
      deps.metrics.waitDuration.observe({ kind: d.kind, decision: d.decision }, d.waitedMs / 1000);
    } else if (fresh) {
      // No host id: which machine ran a job is the operator's business (it is in the host's log).
      emit("run.started", {});
    }
    // Else the row, or a recovery's or resume's journal, could not be read (a partition from
    // Postgres): a run.started sent anyway stood in a recovered job's stream where its
    // run.recovered belonged (chaos:claims saw it twice). None is sent; the projector writes this
    // execution's first event from Postgres (executions rows) ahead of its first batch or the
    // job's projected end (docs/events.md).
  }
}

/**
 * The outcome of an error a step threw: the abort's outcome when the run was stopped, else a
 * failure (the detail goes to this log only: failed() shows the tenant a generic message for
 * internal codes).
 */
export function unexpectedOutcome(exec: Execution, err: unknown, text: string): FinalOutcome {
  const { deps, run } = exec;
  if (run.abort.signal.aborted) return abortedOutcome(run, text);
  if (err instanceof ModelError) {
    deps.log.warn("model call failed", { ...exec.fields, ...errorFields(err) });
    return failed(err.code, err.message, text);
  }
  deps.log.error("run failed", { ...exec.fields, ...errorFields(err) });
  return failed("internal_error", err instanceof Error ? err.message : String(err), text);
}

/** Prepare, run the turns, and decide the outcome (or a wait). Never throws. */
export async function runAgent(exec: Execution, start: Start): Promise<FinalOutcome | WaitOutcome> {
  const { run, emit } = exec;
  const { resume, recovery } = start;
  let text = "";

  try {
    const prepared = await prepare(exec, start);
    if ("state" in prepared) return prepared;
    const { model, fallbacks, messages, tools, request, format } = prepared;
    const loop: LoopState = {
      maxTurns: prepared.maxTurns,
      repaired: false,
      offered: new Set((tools ?? []).map((t) => t.name)),
    };
    let firstTurn = 1;
    const rebuilt = resume?.rebuilt ?? recovery?.rebuilt ?? null;
    if (rebuilt) {
      // A resume or a recovery continues after the journal's last step, its counters from there.
      text = rebuilt.text;
      if (rebuilt.repairedAt !== null) {
        loop.repaired = true;
        loop.maxTurns = rebuilt.repairedAt + 1;
      }
      firstTurn = rebuilt.turn + 1;
    }
    if (resume?.checkpoint.budget) {
      // The budget wait's decision: deny ends the run; approve (its add_usd already in this
      // execution's tree budget, loadRunnableJob) goes on with the turn that was refused.
      const d = resume.decision.decision;
      if (d.decision !== "approve") {
        return failed(
          "budget_exceeded",
          d.decidedBy === "deadline"
            ? "nobody raised the job's budget before the wait's deadline (limits.on_budget: ask)"
            : "the job's budget was not raised: the budget.exhausted wait was denied",
          text,
        );
      }
    } else if (resume) {
      // Continue the turn the last execution suspended in: the decided call, then the rest.
      const { checkpoint, decision } = resume;
      // A children wait: every delegate call of the turn gets its child's end as its result.
      const delegated = checkpoint.children ? await childResults(exec, checkpoint.children) : new Map<string, string>();
      const ran = await runCalls(exec, {
        messages,
        calls: resume.rebuilt.open.map((o) => o.call),
        turn: checkpoint.turn,
        text,
        loop,
        decided: checkpoint.children ? null : decision,
        delegated,
        inFlight: new Set(),
        sourceCalls: new Set(),
      });
      if (ran) return ran;
    }
    if (recovery) {
      // The open calls of the last journaled turn first.
      const calls = openCalls(recovery);
      if (calls.length > 0) {
        // A parent recovering after its children's wait, before their results were journaled:
        // their ends are the open delegate calls' results (a children wait of an earlier turn is
        // not read again).
        const cp = readCheckpoint(exec.job.checkpoint);
        const waitedFor = cp?.children && calls.some((c) => cp.children?.calls[c.id] !== undefined);
        const delegated = waitedFor && cp.children ? await childResults(exec, cp.children) : new Map<string, string>();
        const ran = await runCalls(exec, {
          messages,
          calls,
          turn: recovery.rebuilt.turn,
          text,
          loop,
          decided: null,
          delegated,
          inFlight: recovery.inFlight,
          sourceCalls: recovery.sourceCalls,
        });
        if (ran) return ran;
      }
      if (recovery.sandboxReset) {
        const note = recovery.forkedFrom ? FORK_SANDBOX_NOTE : SANDBOX_RESET_NOTE;
        messages.push({ role: "user", content: note });
        exec.journal.note({ kind: "user", payload: { content: note, why: "recovery", turn: recovery.rebuilt.turn } });
      }
    }

    // Why the next turn starts, announced by `model.turn` so a client can tell the turns' text apart.
    let reason: ModelTurnReason = resume
      ? "resumed"
      : recovery?.forkedFrom
        ? "forked"
        : recovery
          ? "recovered"
          : "start";
    for (let turn = firstTurn; ; turn++) {
      // The steps before this turn (its input, the last turn's results) are durable first.
      if (!(await exec.journal.write())) return abortedOutcome(run, text);
      emit("model.turn", { turn, reason });
      const called = await callModel(exec, {
        model,
        fallbacks,
        turn,
        request: { ...request, messages, tools },
        textSoFar: text,
      });
      if ("state" in called) return called;
      const { text: turnText, calls } = called;
      text = turnText;
      if (run.abort.signal.aborted) return abortedOutcome(run, text);

      if (calls.length > 0) {
        if (turn >= loop.maxTurns) return failed("too_many_turns", `the agent used ${loop.maxTurns} model turns`, text);
        messages.push({ role: "assistant", content: turnText, toolCalls: calls });
        // Rides on the turn's first call (or wait): nothing the calls do comes before it.
        exec.journal.note({ kind: "turn", payload: { turn, text: turnText, calls } });
        const ran = await runCalls(exec, {
          messages,
          calls,
          turn,
          text,
          loop,
          decided: null,
          delegated: new Map(),
          inFlight: new Set(),
          sourceCalls: new Set(),
        });
        if (ran) return ran;
        reason = "tool_results";
        continue;
      }
      // Input that arrived during the turn is applied in one more turn (bounded).
      messages.push({ role: "assistant", content: turnText });
      // Journaled only if the run goes on after it (the input or the repair note is noted with it).
      const answered: TurnStep = { kind: "turn", payload: { turn, text: turnText, calls: [] } };
      if (turn < loop.maxTurns && (await applyInputs(exec, messages, answered)) > 0) {
        reason = "input";
        continue;
      }
      if (!format) break;
      const checked = await format.check(turnText, run.abort.signal);
      if (checked.ok) return { state: "completed", output: text, outputJson: checked.value };
      if (checked.final) return failed("output_invalid", checked.problems, text);
      if (loop.repaired) {
        return failed(
          "output_invalid",
          `the answer does not satisfy the agent's response_format, even after a repair turn: ${checked.problems}`,
          text,
        );
      }
      // One repair turn, on top of max_turns: the model is told what was wrong.
      loop.repaired = true;
      loop.maxTurns = turn + 1;
      reason = "repair";
      messages.push({ role: "user", content: repairMessage(checked.problems) });
      exec.journal.note(answered);
      exec.journal.note({ kind: "user", payload: { content: repairMessage(checked.problems), why: "repair", turn } });
    }
    return { state: "completed", output: text };
  } catch (err) {
    return unexpectedOutcome(exec, err, text);
  } finally {
    // Before the terminal write: an MCP call still in flight is cancelled at its server first.
    await run.mcp?.close();
  }
}

/** The loop's counters (a resume or a recovery derives them from the journal). */
interface LoopState {
  maxTurns: number;
  repaired: boolean;
  /** The tool names this run offered the model: a call of any other is refused, never run. */
  offered: ReadonlySet<string>;
}

/**
 * Run one turn's tool calls in order, each result appended to `messages`. A call the approval
 * check (`requiresApproval`, src/domain/approval.ts) gates ends the execution here as a wait,
 * once the journal holds the turn: the calls before it have run and their results are journaled.
 * `decided` is the call a resuming execution continues from: its result comes from the decision.
 * A delegate call with no result yet ends the execution as a `children` wait: it and every other
 * unresolved delegate call of the turn create their children together (parallel children), and
 * the resuming execution finds their results in `delegated`. `inFlight`: calls a recovering
 * execution found started with no result (recovery.ts): one not declared idempotent is never
 * made again. `sourceCalls`: calls a fork's source had started (recovery.ts): never made again,
 * idempotent or not. Each result is journaled before the next call.
 * Returns null when every call ran, else the outcome that ends the execution.
 */
async function runCalls(
  exec: Execution,
  step: {
    messages: ModelMessage[];
    calls: ModelToolCall[];
    turn: number;
    text: string;
    loop: LoopState;
    decided: { callId: string; decision: ResumeDecision } | null;
    delegated: Map<string, string>;
    inFlight: ReadonlySet<string>;
    sourceCalls: ReadonlySet<string>;
  },
): Promise<FinalOutcome | WaitOutcome | null> {
  const { run, emit } = exec;
  const { messages, calls, turn, text, loop, decided, delegated, inFlight, sourceCalls } = step;
  const definition = exec.job.agent?.definition ?? null;
  // What a waitpoint at `call` keeps beside the journal: which call waits, in which turn.
  const checkpointAt = (call: ModelToolCall) => ({ v: 2 as const, callId: call.id, turn });
  for (const [i, call] of calls.entries()) {
    let result: { content: string } | FinalOutcome;
    const known = delegated.get(call.id);
    if (known !== undefined) {
      result = { content: known };
    } else if (delegateTarget(definition, call.name) !== null) {
      const batch = calls.slice(i).filter((c) => delegateTarget(definition, c.name) !== null && !delegated.has(c.id));
      const plan = await planChildren(exec, { definition, calls: batch });
      if (plan.children.length > 0) {
        // The turn is durable before the job waits (a recovery after the resume rebuilds from it).
        if (!(await exec.journal.write())) return abortedOutcome(run, text);
        return {
          state: "waiting",
          kind: "children",
          // The children's own timeouts end them; this deadline only bounds a wait that something
          // outside the tree broke (a child row deleted by hand), and it fails the parent.
          approval: { deadline_s: AGENT_LIMITS.maxApprovalDeadlineS, on_deadline: "fail" },
          children: plan.children,
          checkpoint: { ...checkpointAt(call), children: plan.checkpoint },
          call,
          text,
        };
      }
      // Every call of the batch was refused (limits, arguments): the errors are their results.
      for (const [callId, refused] of Object.entries(plan.checkpoint.calls)) {
        const output = "error" in refused ? refused.error : null;
        emit("tool.result", { id: callId, ok: false, output });
        delegated.set(callId, JSON.stringify({ error: output }));
      }
      result = { content: delegated.get(call.id) as string };
    } else if (decided && call.id === decided.callId) {
      result = await decidedCallResult(exec, call, decided.decision);
    } else if (sourceCalls.has(call.id)) {
      // The fork's source made (or was making) this call: its side effect is the source's.
      emit("tool.result", { id: call.id, ok: false, output: FORK_OUTCOME_UNKNOWN });
      result = { content: JSON.stringify({ error: FORK_OUTCOME_UNKNOWN }) };
    } else if (
      inFlight.has(call.id) &&
      // The agent's entry says so, or the code tool's own definition (defineTool's `idempotent`).
      !(isIdempotent(definition, call.name) || exec.deps.codeTools?.spec(call.name)?.idempotent === true)
    ) {
      // In flight at the loss, and not safe to repeat: a person decides again, or the model is told.
      if (requiresApproval(definition, call.name) === "approval") {
        if (!(await exec.journal.write())) return abortedOutcome(run, text);
        return {
          state: "waiting",
          kind: "approval",
          approval: approvalSettings(definition),
          checkpoint: checkpointAt(call),
          call,
          text,
          note: OUTCOME_UNKNOWN_NOTE,
        };
      }
      emit("tool.result", { id: call.id, ok: false, output: OUTCOME_UNKNOWN });
      result = { content: JSON.stringify({ error: OUTCOME_UNKNOWN }) };
    } else if (!loop.offered.has(call.name)) {
      result = unofferedCall(exec, call, text);
    } else {
      // A code tool may ask for approval itself (defineTool's requires_approval), as an agent may.
      const wait =
        requiresApproval(definition, call.name) ??
        (exec.deps.codeTools?.spec(call.name)?.requires_approval ? "approval" : null);
      if (wait) {
        if (!(await exec.journal.write())) return abortedOutcome(run, text);
        return {
          state: "waiting",
          kind: wait,
          approval: approvalSettings(definition),
          checkpoint: checkpointAt(call),
          call,
          text,
        };
      }
      result = await runTool(exec, call);
    }
    if ("state" in result) return result;
    messages.push({ role: "tool", toolCallId: call.id, content: result.content });
    if (run.abort.signal.aborted) return abortedOutcome(run, text);
    if (!(await exec.journal.write({ kind: "result", payload: { call_id: call.id, content: result.content } }))) {
      return abortedOutcome(run, text);
    }
    if (run.workspaceDirty) await snapshotWorkspace(exec);
  }
  return null;
}

interface PreparedRun {
  model: ModelEntry;
  /** The agent's fallback models, in order (its `model` list after the primary). */
  fallbacks: ModelEntry[];
  messages: ModelMessage[];
  tools: ModelToolSpec[] | undefined;
  /** What every turn sends besides the messages and tools: the model, sampling, limits, format. */
  request: Omit<TurnRequest, "messages" | "tools">;
  maxTurns: number;
  format: AnswerFormat | null;
}

/**
 * The run's context beyond its row (readRow): the model it may use, the tools it allows (none
 * without a sandbox), the agent's instructions as the first (system) message, and input sent so
 * far; then the `prepared_at` fact (written with the next heartbeat or the terminal write) and
 * `run.prepared`. Without an agent the built-in default agent runs: the job's tools, no
 * instructions, MAX_TURNS turns, the provider's default sampling.
 */
async function prepare(exec: Execution, start: Start): Promise<PreparedRun | FinalOutcome> {
  const { deps, run, job } = exec;
  const { resume, recovery } = start;
  const agent = job.agent?.definition ?? null;
  // The gateway accepts only offered models, but a row may predate the list or come from a
  // gateway configured differently: never hand the provider (or the quota) a name not offered.
  const listed = agent ? agentModels(agent) : [];
  const requested = job.model ?? listed[0] ?? null;
  const model = resolveModel(deps.models, requested);
  if (model === null) {
    return failed(
      "model_not_allowed",
      `model "${requested}" is not offered by this host (MODELS: ${deps.models.entries.map((e) => e.name).join(", ")})`,
      "",
    );
  }
  // The agent's fallbacks after its primary (the job's model), each only if this host offers it.
  const fallbacks = listed.slice(1).flatMap((name) => {
    const entry = resolveModel(deps.models, name);
    if (entry === null)
      deps.log.warn("fallback model not offered by this host; skipped", { ...exec.fields, model: name });
    return entry === null || entry.name === model.name ? [] : [entry];
  });
  // A first run starts from the job's input; a resumed or recovered one continues with the
  // journal's conversation after it (the same rebuild, journal.ts).
  const base: ModelMessage[] = [
    ...(agent?.instructions ? [{ role: "system" as const, content: agent.instructions }] : []),
    ...job.messages,
  ];
  const rebuilt = resume?.rebuilt ?? recovery?.rebuilt ?? null;
  // A run that has no workspace of its own yet (none restored, no sandbox journaled) starts from
  // its conversation's, on its first tool call.
  run.conversationRestore =
    keepsConversationWorkspace(job) && run.pendingRestore === null && !(rebuilt?.hadSandbox ?? false);
  const messages: ModelMessage[] = rebuilt ? [...base, ...rebuilt.messages] : base;
  const allowed = allowedTools(job);
  // In the order the agent (or job) lists them: what the provider sees is exactly that list;
  // ask_user needs no sandbox.
  const sandboxTools =
    allowed.length > 0 && deps.sandbox
      ? allowed.flatMap((name) => SANDBOX_TOOL_SPECS.filter((t) => t.name === name))
      : [];
  // The agent's MCP servers' allowed tools, after the sandbox tools (no sandbox needed); a
  // resumed run connects again, with its own execution's identity.
  const servers = mcpServersOf(agent);
  if (servers.length > 0) {
    run.mcp = await McpToolset.open(servers, deps.mcp ?? MCP_DISABLED, exec.id, job.tenantId, exec.signal, deps.log);
  }
  const mcpTools = run.mcp?.specs ?? [];
  const offered = [
    ...sandboxTools,
    // The agent's code tools, in its order; one this host lacks is offered as unavailable.
    ...codeToolNames(job).map((name) => codeToolSpec(exec, name)),
    ...mcpTools,
    ...(agent?.ask_user === true ? [ASK_USER_SPEC] : []),
    ...(await delegateSpecs(exec, agent)),
  ];
  const tools = offered.length > 0 ? offered : undefined;
  const format =
    agent?.response_format && job.agent ? answerFormat(job.agent.name, agent.response_format, deps.offload) : null;
  // A resumed conversation ends with the assistant's tool calls, whose results must come next:
  // input sent meanwhile waits for the next turn boundary (and the answer to ask_user is the
  // pending call's result, applied by decidedCallResult).
  // So does a recovered conversation that ends with calls still open.
  if (!resume && !(recovery && recovery.rebuilt.open.length > 0)) await applyInputs(exec, messages);
  run.observe("prepared_at");
  if (!resume && !recovery) exec.emit("run.prepared", {});
  return {
    model,
    fallbacks,
    messages,
    tools,
    request: {
      model: model.name,
      maxOutputTokens:
        agent?.limits.max_output_tokens ?? deps.defaultMaxOutputTokens ?? AGENT_LIMITS.defaultMaxOutputTokens,
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
 * turn: accepted (event), appended as user messages (journaled with the next turn's start,
 * after `before`: the answer they follow), then marked applied. Returns how many.
 */
async function applyInputs(exec: Execution, messages: ModelMessage[], before?: TurnStep): Promise<number> {
  const { deps, emit } = exec;
  const inputs = await acceptPendingInputs(deps.db, exec.id);
  if (inputs.length === 0) return 0;
  if (before) exec.journal.note(before);
  for (const input of inputs) {
    emit("input.accepted", { input_id: input.id, content: input.content });
    messages.push({ role: "user", content: input.content });
    exec.journal.note({
      kind: "user",
      payload: { content: input.content, why: "input", turn: before?.payload.turn ?? 0 },
    });
  }
  await markInputsApplied(
    deps.db,
    exec.id,
    inputs.map((i) => i.id),
  );
  return inputs.length;
}
