/**
 * The waitpoint on the host: the checkpoint a run suspends with, the suspend itself (sandbox
 * released inside its cleanup fence, then one fenced statement, then the events), and how the
 * next execution turns the recorded decision into the pending call's tool result. Resume is not
 * re-run: the new execution continues from the journal (the checkpoint names the call that
 * waits), so tool calls completed before the wait are never repeated, and the approved call runs
 * once, in the execution that resumed.
 */

import type { AgentApproval } from "../../src/contracts/agent";
import type { WaitKind } from "../../src/contracts/wait";
import { applyAnswerInput } from "../../src/db/ownership-repo";
import { type ChildJob, type ResumeDecision, suspendJob } from "../../src/db/wait-repo";
import { ASK_USER_TOOL } from "../../src/domain/approval";
import type { ModelToolCall, ModelToolSpec } from "../model/types";
import type { ChildrenCheckpoint } from "./delegate";
import { type Execution, failed } from "./run-context";
import { codeToolNames, destroySandbox, runTool } from "./tool-step";
import { snapshotWorkspace } from "./workspace";

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
 * that resumes: a view of the journal, not a copy of it. The conversation (every turn, every
 * completed tool result, every user message the loop added) is already in `job_journal`, written
 * before the suspend; the resuming execution rebuilds it from there as a recovery does
 * (`rebuildFromJournal`, journal.ts). The checkpoint only names the call that waits (the first
 * open call of the journal's last turn; the calls after it are the turn's other open calls) and,
 * for a children wait, the child each delegate call created. Its size does not grow with the run.
 */
export interface RunCheckpoint {
  v: 2;
  /** The call that waits. */
  callId: string;
  /** The turn whose calls are being run: the journal's last turn. */
  turn: number;
  /** Kind `children`: the turn's delegate calls and the child each created (delegate.ts). */
  children?: ChildrenCheckpoint;
  /**
   * Kind `budget`: the wait is before a model call, not at a tool call. `callId` names the wait
   * only; the journal ends at `turn` with no call open, and the run continues with turn + 1.
   */
  budget?: true;
}

/** The agent loop's outcome when a call must wait: what runJob suspends with. */
export interface WaitOutcome {
  state: "waiting";
  kind: WaitKind;
  checkpoint: RunCheckpoint;
  /** The call that waits (its name and arguments go to `waiting_for`). */
  call: ModelToolCall;
  /** The answer text so far (the last turn's): the output if the run is cancelled instead. */
  text: string;
  approval: AgentApproval;
  /** Kind `children`: the child jobs the suspend statement creates. */
  children?: ChildJob[];
  /** Kind `approval`: what the person is told besides the call (a recovery's outcome-unknown note). */
  note?: string;
}

/**
 * The checkpoint a job's row holds, or null when it holds none (a broken one fails the run, never
 * loops). Version 1 (hosts before the checkpoint became a journal view) also carried the whole
 * conversation: only its pending call, turn and children are read, the conversation comes from
 * the journal, which those hosts wrote too.
 */
export function readCheckpoint(raw: Record<string, unknown> | null): RunCheckpoint | null {
  if (raw === null) return null;
  const broken = () => new Error("the job's checkpoint is not one this host can resume from");
  const children = raw.children as ChildrenCheckpoint | undefined;
  if (raw.v === 2) {
    if (typeof raw.callId !== "string" || typeof raw.turn !== "number") throw broken();
    return {
      v: 2,
      callId: raw.callId,
      turn: raw.turn,
      ...(children ? { children } : {}),
      ...(raw.budget === true ? { budget: true as const } : {}),
    };
  }
  const pending = raw.pending as { id?: unknown } | undefined;
  if (raw.v === 1 && typeof pending?.id === "string" && typeof raw.turn === "number") {
    return { v: 2, callId: pending.id, turn: raw.turn, ...(children ? { children } : {}) };
  }
  throw broken();
}

function questionOf(call: ModelToolCall): string {
  const q = (call.args as { question?: unknown } | null)?.question;
  return typeof q === "string" ? q : JSON.stringify(call.args ?? null);
}

export type SuspendResult = "suspended" | "cancel_requested" | "ownership_lost";

/**
 * Suspend the run: remove its sandbox and clear the cleanup fence while still the owner (a
 * waiting job has no execution for the janitor to match it by), then the fenced suspend
 * statement, then `tool.approval_requested` / `input.requested` / `budget.exhausted` and `run.suspended`. The events
 * follow the write so a client that acts on them finds the job waiting.
 */
export async function suspendRun(exec: Execution, wait: WaitOutcome): Promise<SuspendResult> {
  const { deps, run, emit, id } = exec;
  // Still `running` (heartbeats go on) while the sandbox is removed, which can take seconds.
  if (run.sandboxUsed && deps.sandbox) {
    // The execution that resumes the job unpacks this workspace into its new sandbox.
    await snapshotWorkspace(exec);
    await destroySandbox(exec);
    run.sandboxUsed = false;
  }
  // From here the row stops being `running`: a heartbeat must not read that as a lost run.
  run.phase = "finishing";
  const call = wait.call;
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
  } else if (wait.kind === "budget") {
    const args = call.args as { spent_usd: number; limit_usd: number };
    emit("budget.exhausted", {
      call_id: call.id,
      spent_usd: args.spent_usd,
      limit_usd: args.limit_usd,
      model: call.name,
      deadline_at: result.deadlineAt,
    });
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
  deps.log.info("run suspended at a waitpoint", { ...exec.fields, kind: wait.kind, call_id: call.id });
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
