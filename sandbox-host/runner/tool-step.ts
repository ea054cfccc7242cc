/**
 * One tool call, with its events: an MCP tool of the run's agent at its server, a code tool the
 * agent lists on a tool thread (code-tool-step.ts), anything else in the run's sandbox (created
 * lazily by the first call).
 */

import type { EventPayload } from "../../src/contracts/events";
import { type JobError, tenantJobError } from "../../src/contracts/job";
import { type FinalOutcome, setCleanupPending } from "../../src/db/ownership-repo";
import type { RunnableJob } from "../../src/db/run-repo";
import { toolNames } from "../../src/domain/approval";
import { errorFields } from "../log";
import type { McpToolset } from "../mcp/toolset";
import type { ModelToolCall } from "../model/types";
import { isRunFatal } from "../sandbox/sandbox-errors";
import { callSandboxTool, isSandboxTool, toolResultContent } from "../sandbox/tools";
import { inSpan, markOutcome } from "../tracing/spans";
import { runCodeTool } from "./code-tool-step";
import { abortedOutcome, type Emit, type Execution, failed } from "./run-context";
import { restoreWorkspace, WORKSPACE_WRITERS } from "./workspace";

/** A call the run must not make: visible as a call and its failed result, which the model reads. */
export function refuseTool(call: ModelToolCall, emit: Emit, message: string): { content: string } {
  emit("tool.call", { id: call.id, name: call.name, args: call.args });
  const error = { code: "invalid_input", message };
  emit("tool.result", { id: call.id, ok: false, output: error });
  return { content: toolResultContent({ ok: false, error }) };
}

/** The sandbox tools a job may use: its agent's, else the job's own `tools`. */
export function allowedTools(job: RunnableJob): readonly string[] {
  const agent = job.agent?.definition ?? null;
  return agent ? toolNames(agent.tools).filter(isSandboxTool) : job.tools;
}

/** The code tools (HOST_TOOLS) a job's agent lists: its `tools` that are not sandbox tools. */
export function codeToolNames(job: RunnableJob): readonly string[] {
  const agent = job.agent?.definition ?? null;
  return agent ? toolNames(agent.tools).filter((n) => !isSandboxTool(n)) : [];
}

/**
 * A call of a name the run did not offer the model: one behaviour whatever tools the agent has
 * (none, sandbox, MCP): a tool error `unknown tool` the model reads, and the run goes on. A
 * provider may return any name, and a sandbox tool the agent does not list must not run just
 * because this host has a sandbox. Only a sandbox tool the job allows, on a host without a
 * sandbox, fails the run `tools_unavailable`: that is the host's lack, no answer of the model
 * can mend it.
 */
export function unofferedCall(exec: Execution, call: ModelToolCall, text: string): { content: string } | FinalOutcome {
  if (!exec.deps.sandbox && (allowedTools(exec.job) as readonly string[]).includes(call.name)) {
    return failed(
      "tools_unavailable",
      `the model called tool "${call.name}" but this host has no sandbox (Docker)`,
      text,
    );
  }
  return refuseTool(call, exec.emit, `unknown tool "${call.name}"`);
}

/**
 * A tool call in its span (`execute_tool <name>`, GenAI conventions): the outcome is the
 * `tool.result` the call emitted (ok or its error code), or the run's failure.
 */
export async function runTool(exec: Execution, call: ModelToolCall): Promise<{ content: string } | FinalOutcome> {
  const server = exec.run.mcp?.serverOf(call.name) ?? null;
  const attributes = {
    "gen_ai.operation.name": "execute_tool",
    "gen_ai.tool.name": call.name,
    "gen_ai.tool.call.id": call.id,
    ...(server === null ? {} : { "ear.mcp.server": server }),
  };
  return inSpan(exec.deps.tracing.tracer, `execute_tool ${call.name}`, { attributes }, async (span) => {
    let outcome = "no_result";
    let error: { code: string; message: string } | null = null;
    const emit: Emit = (type, payload) => {
      if (type === "tool.result") {
        const r = payload as EventPayload<"tool.result">;
        if (r.id === call.id) {
          outcome = r.ok ? "ok" : "error";
          const out = r.output as { code?: unknown; message?: unknown } | null;
          if (!r.ok && out && typeof out.code === "string") error = { code: out.code, message: String(out.message) };
        }
      }
      exec.emit(type, payload);
    };
    const result = await runToolCall(exec.withEmit(emit), call);
    if ("state" in result) markOutcome(span, result.state, result.state === "failed" ? result.error : null);
    else markOutcome(span, outcome, error);
    return result;
  });
}

async function runToolCall(exec: Execution, call: ModelToolCall): Promise<{ content: string } | FinalOutcome> {
  const { deps, run, emit, id } = exec;
  const server = run.mcp?.serverOf(call.name) ?? null;
  const sandbox = deps.sandbox;
  // Journaled as started before any of it happens (with the turn that asked for it): a recovery
  // that finds this row with no result knows the call may have taken effect (recovery.ts).
  const code = server === null && codeToolNames(exec.job).includes(call.name);
  const started = { call_id: call.id, name: call.name, sandbox: server === null && !code && sandbox !== undefined };
  if (!(await exec.journal.write({ kind: "call", payload: started }))) return abortedOutcome(run, "");
  if (run.mcp && server !== null) return runMcpTool(exec, { mcp: run.mcp, server, call });
  if (code) return runCodeTool(exec, call);
  emit("tool.call", { id: call.id, name: call.name, args: call.args });
  if (!sandbox) {
    // An agent with only MCP tools runs without a sandbox; a call of anything else is the model's mistake.
    const error = { code: "invalid_input", message: `unknown tool "${call.name}"` };
    emit("tool.result", { id: call.id, ok: false, output: error });
    return { content: toolResultContent({ ok: false, error }) };
  }
  if (!run.sandboxUsed) {
    // The fence goes on the row before anything exists to clean up.
    if (!(await setCleanupPending(deps.db, id, true))) {
      run.owned = false;
      return failed("ownership_lost", "the run is no longer the owner", "");
    }
    run.sandboxUsed = true;
  }
  const hadSandbox = sandbox.active().some((s) => s.runId === id.executionId);
  try {
    if (!hadSandbox) {
      // Creation is admitted a few at a time (SANDBOX_CREATE_CONCURRENCY): a turn in the queue is
      // back-pressure, reported as a wait like quota.waiting, never as an error.
      await inSpan(deps.tracing.tracer, "sandbox.create", {}, () =>
        sandbox.ensure(id.executionId, {
          signal: exec.signal,
          onQueued: (ahead) => emit("sandbox.waiting", { ahead }),
        }),
      );
    }
    if (run.pendingRestore || run.conversationRestore) await restoreWorkspace(exec);
    const result = await callSandboxTool(sandbox, id.executionId, call.name, call.args, exec.signal);
    if (WORKSPACE_WRITERS.has(call.name)) run.workspaceDirty = true;
    if (!hadSandbox) emit("sandbox.created", {});
    emit("tool.result", { id: call.id, ok: result.ok, output: result.ok ? result.output : result.error });
    return { content: toolResultContent(result) };
  } catch (err) {
    // Cancelled (or the host is stopping) while waiting for a creation turn: not a sandbox failure.
    if (exec.signal.aborted) return abortedOutcome(run, "");
    // Creation or engine failure: an explicit run error, never a fallback to the host.
    const message = err instanceof Error ? err.message : String(err);
    const fatal = isRunFatal(err);
    deps.log.warn("sandbox tool call failed", { ...exec.fields, ...errorFields(err) });
    // An infrastructure failure's text is the engine's (generic for the tenant); the model's own
    // mistakes (a path outside the workspace, …) keep their explanation.
    const output: JobError = { code: "sandbox_error", message };
    emit("tool.result", { id: call.id, ok: false, output: fatal ? tenantJobError(output) : output });
    return failed(fatal ? "sandbox_error" : "tool_error", message, "");
  }
}

/**
 * An MCP call: whatever the server does, the model gets a tool result (an error included); the
 * run goes on. The events name the server. A cancel stops the call (the caller ends the run).
 */
async function runMcpTool(
  exec: Execution,
  target: { mcp: McpToolset; server: string; call: ModelToolCall },
): Promise<{ content: string }> {
  const { emit } = exec;
  const { mcp, server, call } = target;
  emit("tool.call", { id: call.id, name: call.name, args: call.args, server });
  const result = await mcp.call(call.name, call.args, call.id, exec.signal);
  if (result.ok) {
    emit("tool.result", { id: call.id, ok: true, output: result.output, server });
    return { content: result.text };
  }
  emit("tool.result", { id: call.id, ok: false, output: result.error, server });
  return { content: JSON.stringify({ error: result.error }) };
}

/** The run's terminal state is written: remove its sandbox, then clear the fence on the row. */
export async function destroySandbox(exec: Execution): Promise<void> {
  const { deps, id } = exec;
  try {
    await deps.sandbox?.destroy(id.executionId);
  } catch (err) {
    // The sandbox and the fence stay: the janitor removes it once the run is over, then clears it.
    deps.log.error("sandbox cleanup failed", { ...exec.fields, ...errorFields(err) });
    return;
  }
  // The sandbox is gone, so no janitor listing will find it again: a fence this write misses
  // (the statement failed, or the row is no longer this execution's to write) is handed to the
  // janitor, which clears it once the job no longer runs under this execution.
  try {
    if (!(await setCleanupPending(deps.db, id, false))) deps.fenceOwed(id.executionId);
  } catch (err) {
    deps.log.error("sandbox cleanup fence not cleared", { ...exec.fields, ...errorFields(err) });
    deps.fenceOwed(id.executionId);
  }
}
