/**
 * A call of one of the host's code tools (HOST_TOOLS, docs/tools.md "Code tools"), with its
 * events: run on a tool thread (code-tools/code-tool-pool.ts) with the run's identity as `ctx`
 * and the run's abort as its cancel. Whatever the tool does, the model gets a tool result and
 * the run goes on; a job whose agent lists a tool this host lacks gets `tool_unavailable`.
 */
import type { ModelToolCall, ModelToolSpec } from "../model/types";
import type { Execution } from "./run-context";

/** `<job id>:<tool call id>`: the same for every execution making this call (docs/tools.md). */
export function codeToolIdempotencyKey(jobId: string, callId: string): string {
  return `${jobId}:${callId}`;
}

/**
 * The spec offered for a code tool the agent lists: the host's own, or (a host without it) an
 * open schema whose description says so, so a model that calls it reads why rather than the
 * tool silently missing (as for an MCP server that cannot be used).
 */
export function codeToolSpec(exec: Execution, name: string): ModelToolSpec {
  const spec = exec.deps.codeTools?.spec(name);
  if (spec) return { name, description: spec.description, parameters: spec.input_schema };
  return {
    name,
    description: `Unavailable: the host running this job has no code tool "${name}" (HOST_TOOLS).`,
    parameters: { type: "object" },
  };
}

export async function runCodeTool(exec: Execution, call: ModelToolCall): Promise<{ content: string }> {
  const { emit, id, job } = exec;
  emit("tool.call", { id: call.id, name: call.name, args: call.args });
  const outcome = exec.deps.codeTools
    ? await exec.deps.codeTools.call(
        {
          name: call.name,
          args: call.args,
          identity: {
            job_id: id.jobId,
            execution_id: id.executionId,
            epoch: id.epoch,
            tenant_id: job.tenantId,
            idempotency_key: codeToolIdempotencyKey(id.jobId, call.id),
          },
        },
        exec.signal,
      )
    : ({ ok: false, code: "tool_unavailable", message: `this host has no tool "${call.name}"` } as const);
  if (!outcome.ok) {
    const error = { code: outcome.code, message: outcome.message };
    emit("tool.result", { id: call.id, ok: false, output: error });
    return { content: JSON.stringify({ error }) };
  }
  // A whole result is at most CODE_TOOL_RESULT_MAX_CHARS of JSON: parsed for the event, cheaply.
  const output = outcome.truncated ? { text: outcome.json, truncated: true } : (JSON.parse(outcome.json) as unknown);
  emit("tool.result", { id: call.id, ok: true, output });
  return { content: outcome.truncated ? `${outcome.json}\n[truncated]` : outcome.json };
}
