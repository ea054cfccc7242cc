/**
 * `defineAgent` (package export `edge-agent-runtime/agents`): an agent as code, the API's fields
 * typed (POST /v1/agents, docs/api.md "Agents"), checked when the file loads so a mistake is
 * found before anything is sent. `npm run cli -- agents deploy <dir|file>` finds the agents
 * among a module's exports and creates a version only for those whose definition changed.
 */
import { z } from "zod";
import { type CreateAgentBody, CreateAgentBodySchema } from "../contracts/agent";

/** What a team writes: the name and the definition, defaults not yet applied. */
export type AgentSpec = z.input<typeof CreateAgentBodySchema>;

/** Marks a defined agent. `Symbol.for`, so the CLI finds agents defined with another copy of the package. */
export const AGENT_MARK: unique symbol = Symbol.for("edge-agent-runtime.agent") as never;

export type AgentDefinitionOf = Readonly<AgentSpec> & { readonly [AGENT_MARK]: true };

export class AgentDefinitionError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "AgentDefinitionError";
  }
}

export function defineAgent<const A extends AgentSpec>(spec: A): A & { readonly [AGENT_MARK]: true } {
  const parsed = CreateAgentBodySchema.safeParse(spec);
  if (!parsed.success) {
    const name = typeof spec?.name === "string" ? spec.name : "?";
    throw new AgentDefinitionError(`agent "${name}": ${z.prettifyError(parsed.error).replace(/\n/g, "; ")}`);
  }
  return Object.freeze({ ...spec, [AGENT_MARK]: true as const });
}

export function isDefinedAgent(value: unknown): value is AgentDefinitionOf {
  return typeof value === "object" && value !== null && (value as Record<symbol, unknown>)[AGENT_MARK] === true;
}

/** The agent as the API stores it: its defaults applied (what a deploy compares). */
export function agentBody(agent: AgentSpec): CreateAgentBody {
  return CreateAgentBodySchema.parse(agent);
}
