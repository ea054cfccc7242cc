/**
 * Which tool calls make a run wait for a person: the one approval check every tool call goes
 * through (sandbox-host/runner/agent-loop.ts asks it before running any call), and the names an
 * agent's tools are stored under. Definitions stored before approvals existed lack `approval` and
 * `ask_user`; the defaults below are the schema's own (AgentApprovalSchema), read through it.
 */
import {
  type AgentApproval,
  AgentApprovalSchema,
  type AgentDefinition,
  type AgentTool,
  agentToolName,
} from "../contracts/agent";
import { ASK_USER_TOOL } from "../contracts/tools";
import type { WaitKind } from "../contracts/wait";
import { findMcpTool, mcpRequiresApproval } from "./mcp";

export { ASK_USER_TOOL };

/** The tool names of an agent's `tools`, sandbox and code tools (what `jobs.tools` stores). */
export function toolNames(tools: readonly AgentTool[]): string[] {
  return tools.map((t) => agentToolName(t));
}

/**
 * Whether a call of `toolName` must wait, and for what: `input` for ask_user, `approval` for a
 * tool the definition marks `requires_approval`, null to run it at once. A job without an agent
 * (the built-in default agent) never waits. MCP tools (`<server>__<tool>`) are looked up in their
 * server's own `tools` list (`mcpRequiresApproval`, src/domain/mcp.ts).
 */
export function requiresApproval(
  definition: Pick<AgentDefinition, "tools" | "ask_user" | "mcp_servers"> | null,
  toolName: string,
): WaitKind | null {
  if (!definition) return null;
  if (toolName === ASK_USER_TOOL && definition.ask_user === true) return "input";
  const entry = definition.tools.find((t) => agentToolName(t) === toolName);
  if (entry !== undefined) return typeof entry === "object" && entry.requires_approval ? "approval" : null;
  return mcpRequiresApproval(definition, toolName) === true ? "approval" : null;
}

/** The agent's wait settings, with the schema's defaults for a definition stored before they existed. */
export function approvalSettings(definition: Pick<AgentDefinition, "approval"> | null): AgentApproval {
  return AgentApprovalSchema.parse(definition?.approval ?? {});
}

/**
 * Whether a call of `toolName` may be made again by an execution that recovers the job and finds
 * the call in flight (started, no result journaled): only when the definition's entry for it says
 * `idempotent: true` (a sandbox tool in `tools`, an MCP tool in its server's `tools`). Every other
 * call is never repeated: its result is `outcome_unknown`. The default agent declares none.
 */
export function isIdempotent(
  definition: Pick<AgentDefinition, "tools" | "mcp_servers"> | null,
  toolName: string,
): boolean {
  if (!definition) return false;
  const entry = definition.tools.find((t) => agentToolName(t) === toolName);
  if (entry !== undefined) return typeof entry === "object" && entry.idempotent === true;
  return findMcpTool(definition, toolName)?.idempotent === true;
}
