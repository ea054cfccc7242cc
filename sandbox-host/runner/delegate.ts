/**
 * Sub-agents on the host: the `delegate_<agent>` tools a run offers (one per agent its definition
 * lists under `delegates`, so the model sees each agent's own description), the children a
 * turn's delegate calls plan (limits checked, the agent's latest version pinned), and the tool
 * results the resuming execution reads off the children's rows.
 *
 * One tool per agent rather than one `delegate` tool with an `agent` argument: the model picks
 * the agent by tool name with the agent's description in front of it, and a name the agent may
 * not delegate to is not a tool at all instead of an argument to validate.
 */

import { randomUUID } from "node:crypto";
import { context, trace } from "@opentelemetry/api";
import { type AgentDefinition, agentModels, DELEGATE_TOOL_PREFIX, DELEGATION_LIMITS } from "../../src/contracts/agent";
import { getAgentVersion } from "../../src/db/agents-repo";
import { childrenOf, treePlace } from "../../src/db/children-repo";
import type { ChildJob } from "../../src/db/wait-repo";
import { toolNames } from "../../src/domain/approval";
import { planRefusal, queueFullRefusal } from "../../src/domain/job-admission";
import type { ModelToolCall, ModelToolSpec } from "../model/types";
import { activeTraceparent } from "../tracing/spans";
import type { Execution } from "./run-context";

/** The delegate tools of a definition, in the order it lists its delegates. */
export async function delegateSpecs(exec: Execution, def: AgentDefinition | null) {
  const specs: ModelToolSpec[] = [];
  for (const name of def?.delegates ?? []) {
    const found = await getAgentVersion(exec.deps.db, exec.job.tenantId, name, null);
    specs.push({
      name: `${DELEGATE_TOOL_PREFIX}${name}`,
      description:
        `Delegate a task to the agent "${name}" and get its final answer.` +
        (found?.definition.description ? ` ${found.definition.description}` : ""),
      parameters: {
        type: "object",
        properties: { input: { type: "string", description: "The task for the agent, as its user message" } },
        required: ["input"],
        additionalProperties: false,
      },
    });
  }
  return specs;
}

/** The agent a call delegates to, or null when it is not one of the definition's delegate tools. */
export function delegateTarget(def: AgentDefinition | null, toolName: string): string | null {
  if (!def || !toolName.startsWith(DELEGATE_TOOL_PREFIX)) return null;
  const name = toolName.slice(DELEGATE_TOOL_PREFIX.length);
  return def.delegates.includes(name) ? name : null;
}

/** A delegate call's end as the checkpoint keeps it: the child made, or why none was. */
export type DelegatedCall = { job_id: string; agent: string } | { error: { code: string; message: string } };

/** What the checkpoint of a `children` wait carries besides the waitpoint's fields. */
export interface ChildrenCheckpoint {
  /** The execution that created the children (they name it as parent_execution_id). */
  executionId: string;
  calls: Record<string, DelegatedCall>;
}

const toolError = (code: string, message: string) => ({ error: { code, message } });

/**
 * Plan the children of a turn's delegate calls: each call over a limit (depth, children per job,
 * children per tree, the tenant's queued jobs, its daily budget, in call order), naming an agent
 * that no longer exists or is archived, whose model or tools the tenant may not use (job
 * admission's checks, src/domain/job-admission.ts, with this host's registry and its allow-lists),
 * or without a string `input` gets a tool error instead.
 */
export async function planChildren(
  exec: Execution,
  turn: { definition: AgentDefinition | null; calls: ModelToolCall[] },
): Promise<{ checkpoint: ChildrenCheckpoint; children: ChildJob[] }> {
  const { deps, id, emit } = exec;
  const { definition: def, calls } = turn;
  const tenantId = exec.job.tenantId;
  const place = await treePlace(deps.db, id.jobId);
  const queueLimit = deps.maxQueuedJobsPerTenant ?? 0;
  const out: ChildrenCheckpoint = { executionId: id.executionId, calls: {} };
  const children: ChildJob[] = [];
  for (const call of calls) {
    emit("tool.call", { id: call.id, name: call.name, args: call.args });
    const agent = delegateTarget(def, call.name) as string;
    const input = (call.args as { input?: unknown } | null)?.input;
    let planned: DelegatedCall | ChildJob;
    if (typeof input !== "string" || input.length === 0) {
      planned = toolError("invalid_arguments", "delegate tools take one argument: `input`, a non-empty string");
    } else if (place.overBudget) {
      // The submit's rule (docs/quota.md, "Daily budgets"): a spent budget makes no new job.
      planned = toolError(
        "budget_exceeded",
        "this tenant's daily budget is spent; no child job until the next UTC midnight",
      );
    } else if (place.depth + 1 > DELEGATION_LIMITS.maxDepth) {
      planned = toolError(
        "delegation_depth",
        `this job is at depth ${place.depth}; a child would pass the delegation depth limit of ${DELEGATION_LIMITS.maxDepth}`,
      );
    } else if (place.children + children.length >= DELEGATION_LIMITS.maxChildrenPerJob) {
      planned = toolError(
        "delegation_limit",
        `this job already created ${DELEGATION_LIMITS.maxChildrenPerJob} child jobs (the limit per job)`,
      );
    } else if (place.treeSize + children.length >= DELEGATION_LIMITS.maxChildrenPerTree) {
      planned = toolError(
        "delegation_limit",
        `this job's tree already holds ${DELEGATION_LIMITS.maxChildrenPerTree} child jobs (the limit per tree)`,
      );
    } else if (queueLimit > 0 && place.tenantQueued + children.length >= queueLimit) {
      // The submit check's rule (docs/limits.md): like it, a count taken before the insert, so
      // concurrent creators can pass the limit by what they create at once; it stops a tenant's
      // trees from growing the queue without bound, not an exact quota.
      planned = toolError("rate_limited", queueFullRefusal(queueLimit).message);
    } else {
      const found = await getAgentVersion(deps.db, tenantId, agent, null);
      // The child is admitted as a submit of the agent would be: its model offered to this tenant
      // (not merely served by this host) and its tools; budget and queue are checked above.
      const refused = found
        ? planRefusal(
            deps.models,
            tenantId,
            { model: found.definition.model, tools: toolNames(found.definition.tools) },
            `agent: ${found.view.name}@${found.view.version}'s `,
          )
        : null;
      if (!found || found.archived) {
        planned = toolError("agent_unavailable", `the agent "${agent}" does not exist or is archived`);
      } else if (refused) {
        planned = toolError(refused.reason, refused.message);
      } else {
        const d = found.definition;
        // The delegating call's span, ended at once (the wait is not a span: the parent holds no
        // slot while its children run); the child's execution span is its child, in this trace.
        const span = deps.tracing.tracer.startSpan(`delegate ${agent}`, {
          attributes: {
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.agent.name": agent,
            "gen_ai.tool.call.id": call.id,
          },
        });
        const traceparent = activeTraceparent(trace.setSpan(context.active(), span));
        span.end();
        planned = {
          traceparent,
          id: randomUUID(),
          callId: call.id,
          agentName: found.view.name,
          agentVersion: found.view.version,
          model: agentModels(d)[0] as string,
          tools: toolNames(d.tools),
          timeoutMs: d.limits.timeout_s === null ? null : d.limits.timeout_s * 1000,
          input,
        };
      }
    }
    if ("callId" in planned) {
      children.push(planned);
      out.calls[call.id] = { job_id: planned.id, agent };
    } else {
      out.calls[call.id] = planned;
    }
  }
  return { checkpoint: out, children };
}

/** A delegate call's tool result for the model: the child's answer, or its failure with state and code. */
function resultContent(call: DelegatedCall, child: Awaited<ReturnType<typeof childrenOf>>[number] | undefined) {
  if ("error" in call) return { ok: false, output: call.error };
  if (!child) return { ok: false, output: { code: "child_missing", message: `child job ${call.job_id} is gone` } };
  if (child.state === "completed") return { ok: true, output: child.outputJson ?? child.output ?? "" };
  return {
    ok: false,
    output: {
      code: child.error?.code ?? child.state,
      message: child.error?.message ?? `the child job ended ${child.state}`,
      state: child.state,
      job_id: child.id,
    },
  };
}

/**
 * The tool results of a turn's delegate calls, read from the children's rows once all of them
 * ended, with child.finished and tool.result for each. Keyed by call id.
 */
export async function childResults(exec: Execution, cp: ChildrenCheckpoint): Promise<Map<string, string>> {
  const { emit } = exec;
  const ended = new Map((await childrenOf(exec.deps.db, exec.id.jobId, cp.executionId)).map((c) => [c.callId, c]));
  const results = new Map<string, string>();
  for (const [callId, call] of Object.entries(cp.calls)) {
    const child = ended.get(callId);
    if (child) {
      emit("child.finished", {
        job_id: child.id,
        call_id: callId,
        state: child.state,
        error: child.state === "completed" ? null : (child.error ?? null),
      });
    }
    const r = resultContent(call, child);
    emit("tool.result", { id: callId, ok: r.ok, output: r.output });
    results.set(
      callId,
      r.ok ? (typeof r.output === "string" ? r.output : JSON.stringify(r.output)) : JSON.stringify({ error: r.output }),
    );
  }
  return results;
}
