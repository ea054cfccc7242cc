/**
 * The waitpoint on the host: the checkpoint a run suspends with, the suspend itself (sandbox
 * released inside its cleanup fence, then one fenced statement, then the events), and how the
 * next execution turns the recorded decision into the pending call's tool result. Resume is not
 * re-run: the new execution starts from the checkpoint, so tool calls completed before the wait
 * are never repeated, and the approved call runs once, in the execution that resumed.
 */
import type { AgentApproval } from "../../src/contracts/agent";
import type { WaitKind } from "../../src/contracts/wait";
import { applyAnswerInput } from "../../src/db/ownership-repo";
import { type ChildJob, type ResumeDecision, suspendJob } from "../../src/db/wait-repo";
import { ASK_USER_TOOL } from "../../src/domain/approval";
import type { ModelMessage, ModelToolCall, ModelToolSpec } from "../model/types";
import type { ChildrenCheckpoint } from "./delegate";
import { type Execution, type ExecutionParts, failed, runFields } from "./run-context";
import { codeToolNames, destroySandbox, runTool } from "./tool-step";

/** The ask_user tool as the model sees it (offered when the agent sets `ask_user: true`). */
export const ASK_USER_SPEC: ModelToolSpec = {
  name: ASK_USER_TOOL,
  description:
    "Ask the user a question and wait for the answer. Use it when you need information or a decision only the user can give.",
  parameters: {
    type: "object",
    properties: { question: { type: "string", description: "The question for the user" } },
    required: ["question"],
    additionalProperties: false,
  },
};

/**
 * Where a run suspended, stored on the job row (jobs.checkpoint) and read back by the execution
 * that resumes: the conversation so far (instructions, input, every completed tool call and its
 * result), the pending call, the calls of the same turn after it, and the loop's counters.
 */
export interface RunCheckpoint {
  v: 1;
  messages: ModelMessage[];
  /** The answer text so far (the last turn's). */
  text: string;
  /** The turn whose tool calls are being run. */
  turn: number;
  maxTurns: number;
  repaired: boolean;
  pending: ModelToolCall;
  remaining: ModelToolCall[];
  /** Kind `children`: the turn's delegate calls and the child each created (delegate.ts). */
  children?: ChildrenCheckpoint;
}

/** The agent loop's outcome when a call must wait: what runJob suspends with. */
export interface WaitOutcome {
  state: "waiting";
  kind: WaitKind;
  checkpoint: RunCheckpoint;
  approval: AgentApproval;
  /** Kind `children`: the child jobs the suspend statement creates. */
  children?: ChildJob[];
  /** Kind `approval`: what the person is told besides the call (a recovery's outcome-unknown note). */
  note?: string;
}

/** What a checkpoint's JSON must look like to be resumed from (a broken one fails the run, never loops). */
export function readCheckpoint(raw: Record<string, unknown> | null): RunCheckpoint | null {
  if (raw === null) return null;
  const c = raw as Partial<RunCheckpoint>;
  if (c.v !== 1 || !Array.isArray(c.messages) || !c.pending || !Array.isArray(c.remaining)) {
    throw new Error("the job's checkpoint is not one this host can resume from");
  }
  return c as RunCheckpoint;
}

function questionOf(call: ModelToolCall): string {
  const q = (call.args as { question?: unknown } | null)?.question;
  return typeof q === "string" ? q : JSON.stringify(call.args ?? null);
}

export type SuspendResult = "suspended" | "cancel_requested" | "ownership_lost";

/**
 * Suspend the run: remove its sandbox and clear the cleanup fence while still the owner (a
 * waiting job has no execution for the janitor to match it by), then the fenced suspend
 * statement, then `tool.approval_requested` / `input.requested` and `run.suspended`. The events
 * follow the write so a client that acts on them finds the job waiting.
 */
export async function suspendRun(exec: ExecutionParts, wait: WaitOutcome): Promise<SuspendResult> {
  const { deps, run, emit } = exec;
  const id = run.identity;
  // Still `running` (heartbeats go on) while the sandbox is removed, which can take seconds.
  if (run.sandboxUsed && deps.sandbox) {
    await destroySandbox(deps, id);
    run.sandboxUsed = false;
  }
  // From here the row stops being `running`: a heartbeat must not read that as a lost run.
  run.phase = "finishing";
  const call = wait.checkpoint.pending;
  const question = wait.kind === "input" ? questionOf(call) : (wait.note ?? null);
  const result = await suspendJob(deps.db, id, {
    kind: wait.kind,
    callId: call.id,
    tool: call.name,
    arguments: call.args,
    question,
    deadlineS: wait.approval.deadline_s,
    onDeadline: wait.approval.on_deadline,
    checkpoint: wait.checkpoint as unknown as Record<string, unknown>,
    facts: run.pendingFacts(),
    children: wait.children,
  });
  if (!result.suspended) {
    if (result.cancelRequested) return "cancel_requested";
    run.owned = false;
    return "ownership_lost";
  }
  if (wait.kind === "children") {
    for (const child of wait.children ?? []) {
      emit("child.created", { job_id: child.id, call_id: child.callId, agent: child.agentName });
    }
  } else if (wait.kind === "approval") {
    emit("tool.approval_requested", {
      call_id: call.id,
      tool: call.name,
      arguments: call.args,
      deadline_at: result.deadlineAt,
      ...(wait.note ? { note: wait.note } : {}),
    });
  } else {
    emit("input.requested", { call_id: call.id, question: question ?? "", deadline_at: result.deadlineAt });
  }
  emit("run.suspended", { waiting_for: { kind: wait.kind, call_id: call.id, tool: call.name } });
  deps.metrics.waitsStarted.inc({ kind: wait.kind });
  deps.log.info("run suspended at a waitpoint", { ...runFields(id), kind: wait.kind, call_id: call.id });
  return "suspended";
}

/**
 * The pending call's tool result from the decision: approve runs the tool now (exactly once:
 * this execution is the only one that ever resumes from this checkpoint), deny gives the model
 * the note, an answer to ask_user is the input (applied here, fenced).
 */
export async function decidedCallResult(
  exec: Execution,
  call: ModelToolCall,
  decided: ResumeDecision,
): Promise<{ content: string } | ReturnType<typeof failed>> {
  const { deps, run, emit } = exec;
  if (decided.decision === "approve") {
    // An MCP tool runs at its server, a code tool on a tool thread: only a sandbox tool needs the host's Docker.
    if (!deps.sandbox && run.mcp?.serverOf(call.name) == null && !codeToolNames(exec.job).includes(call.name))
      return failed("tools_unavailable", "the approved tool needs a sandbox (Docker), and this host has none", "");
    return runTool(exec, call);
  }
  if (decided.decision === "input" && decided.input) {
    if (!(await applyAnswerInput(deps.db, exec.id, decided.input.id))) {
      run.owned = false;
      return failed("ownership_lost", "the run is no longer the owner", "");
    }
    emit("input.accepted", { input_id: decided.input.id, content: decided.input.content });
    emit("tool.result", { id: call.id, ok: true, output: { answer: decided.input.content } });
    return { content: decided.input.content };
  }
  const message =
    decided.note ?? (decided.kind === "input" ? "the user did not answer" : "the user denied this tool call");
  const error = { code: "denied", message };
  emit("tool.result", { id: call.id, ok: false, output: error });
  return { content: JSON.stringify({ error }) };
}
