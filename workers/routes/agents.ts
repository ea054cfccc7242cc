/**
 * Agents (docs/api.md "Agents"): a tenant's own agent definitions as immutable numbered versions.
 * A version is never edited: POST /v1/agents/{name}/versions stores the whole next definition.
 * Another tenant's agent of the same name is simply not there (404).
 */
import {
  AGENT_NAME_RE,
  type AgentDefinition,
  AgentDefinitionSchema,
  agentToolName,
  CreateAgentBodySchema,
} from "../../src/contracts/agent";
import {
  AgentAnswerSchema,
  AgentPageSchema,
  AgentVersionPageSchema,
  ListAgentsQuerySchema,
} from "../../src/contracts/catalog";
import { ApiError } from "../../src/contracts/errors";
import { agentNameParam, agentVersionParam, BODY_ERRORS, V1_ERRORS } from "../../src/contracts/openapi";
import { isSandboxTool } from "../../src/contracts/sandbox-tools";
import {
  type AgentCapReached,
  type AgentCaps,
  archiveAgent,
  createAgent,
  createAgentVersion,
  getAgentVersion,
  listAgents,
  listAgentVersions,
} from "../../src/db/agents-repo";
import type { Db } from "../../src/db/client";
import { knownCodeTools } from "../../src/db/code-tools-repo";
import { toolNames } from "../../src/domain/approval";
import { assertAdmitted, modelRefusal } from "../../src/domain/job-admission";
import { jsonSchemaProblem } from "../../src/domain/json-schema";
import { mcpServersProblem } from "../../src/domain/mcp";
import { callDependency } from "../deps";
import type { GatewayConfig } from "../gateway-config";
import { route, routes } from "./route";

function notFoundAgent(name: string): ApiError {
  return new ApiError("not_found", `agent "${name}" not found`);
}

/** A name that cannot be an agent's cannot name one: 404 without a query (and without echoing it). */
function agentName(raw: string): string {
  if (!AGENT_NAME_RE.test(raw)) throw new ApiError("not_found", "agent not found");
  return raw;
}

function versionParam(raw: string): number {
  if (!/^[1-9][0-9]{0,8}$/.test(raw)) throw new ApiError("not_found", "version not found");
  return Number(raw);
}

/**
 * What zod cannot check about a definition: its model is one the operator offers this tenant,
 * its response_format is a JSON Schema the hosts can validate answers with, and its MCP servers
 * are at URLs the operator allows, with secrets the operator holds for this tenant.
 */
function checkDefinition(config: GatewayConfig, tenantId: string, d: AgentDefinition): void {
  assertAdmitted(modelRefusal(config.models, tenantId, d.model));
  if (d.response_format !== null) {
    const problem = jsonSchemaProblem(d.response_format);
    if (problem !== null) {
      throw new ApiError("invalid_request", `response_format: not a valid JSON Schema (draft 2020-12): ${problem}`);
    }
  }
  const mcpProblem = mcpServersProblem(d.mcp_servers, config.mcp.allowedUrls, config.mcp.secretNames, tenantId);
  if (mcpProblem !== null) throw new ApiError("invalid_request", mcpProblem);
}

/**
 * Every tool the definition lists is built in or a code tool some host offers (the catalog,
 * GET /v1/tools): a name no host has would only ever answer tool_unavailable.
 */
async function checkToolNames(db: Db, d: AgentDefinition): Promise<void> {
  const code = toolNames(d.tools).filter((n) => !isSandboxTool(n));
  if (code.length === 0) return;
  const known = await callDependency("postgres", () => knownCodeTools(db, code));
  const i = d.tools.findIndex((t) => !isSandboxTool(agentToolName(t)) && !known.has(agentToolName(t)));
  if (i >= 0) {
    const name = agentToolName(d.tools[i] as AgentDefinition["tools"][number]);
    throw new ApiError(
      "invalid_request",
      `tools.${i}: unknown tool "${name}" (not a built-in tool, and no host offers a code tool of that name: GET /v1/tools lists them)`,
    );
  }
}

/** The operator's caps on a tenant's agents (MAX_AGENTS_PER_TENANT, MAX_VERSIONS_PER_AGENT, MAX_AGENT_BYTES_PER_TENANT). */
function agentCaps(config: GatewayConfig): AgentCaps {
  return {
    maxAgents: config.limits.maxAgentsPerTenant,
    maxVersions: config.limits.maxVersionsPerAgent,
    maxBytes: config.limits.maxAgentBytesPerTenant,
  };
}

/** 409 `agent_limit_reached`, naming the cap: it does not lift with time, only by the operator. */
function capReached(config: GatewayConfig, which: AgentCapReached, name: string): ApiError {
  const l = config.limits;
  const why =
    which === "agents"
      ? `this tenant already has ${l.maxAgentsPerTenant} agents (archived ones included), the most it may have`
      : which === "versions"
        ? `agent "${name}" already has ${l.maxVersionsPerAgent} versions, the most one agent may have`
        : `this tenant's agent definitions would pass ${l.maxAgentBytesPerTenant} bytes in all, the most it may store`;
  return new ApiError("agent_limit_reached", `${why} (docs/limits.md)`);
}

/** The definition fields of a create body (everything but the name). */
function definitionOf(body: Record<string, unknown>): AgentDefinition {
  const { name: _, ...definition } = body;
  return definition as AgentDefinition;
}

/** Cursors are opaque to clients; inside, the last name (agents) or version (versions) of the page. */
const encodeCursor = (last: string | number) => btoa(JSON.stringify([last])).replace(/=+$/, "");

function decodeCursor<T extends "string" | "number">(raw: string | undefined, kind: T) {
  if (raw === undefined) return undefined;
  try {
    const [last] = JSON.parse(atob(raw)) as unknown[];
    if (typeof last === kind) return last as T extends "string" ? string : number;
  } catch {}
  throw new ApiError("invalid_request", "cursor: not a cursor returned by this API");
}

export const agentRoutes = routes(
  route({
    method: "post",
    path: "/",
    operationId: "createAgent",
    tag: "agents",
    summary: "Define an agent: its name and version 1",
    description:
      "`model` must be one GET /v1/models lists for this tenant; `response_format`, when given, must be a valid JSON Schema (draft 2020-12, references inside the schema only). Each of `mcp_servers` must have a `url` under one of the operator's allowed MCP URL prefixes and headers that name the operator's MCP secrets (400 `invalid_request` otherwise; with no allowed prefixes MCP is off and any server is refused). An agent of that name (archived ones included) is a 409 `conflict`; past the tenant's cap on agents or on definition bytes (docs/limits.md) a 409 `agent_limit_reached`.",
    auth: "bearer",
    body: CreateAgentBodySchema,
    responses: [{ status: 201, description: "Version 1.", schema: AgentAnswerSchema }],
    errors: [...BODY_ERRORS, "conflict", "agent_limit_reached", ...V1_ERRORS],
    handler: async (c, input) => {
      const config = c.get("config");
      const body = await input.body();
      const definition = definitionOf(body);
      checkDefinition(config, c.get("tenantId"), definition);
      const db = c.get("deps").db();
      await checkToolNames(db, definition);
      const created = await callDependency("postgres", () =>
        createAgent(db, c.get("tenantId"), body.name, definition, agentCaps(config)),
      );
      if ("limit" in created) throw capReached(config, created.limit, body.name);
      if ("exists" in created) {
        throw new ApiError(
          "conflict",
          `an agent named "${body.name}" already exists (archived ones included): POST /v1/agents/${body.name}/versions adds a version`,
        );
      }
      return c.json({ agent: created.ok.view }, 201);
    },
  }),
  route({
    method: "get",
    path: "/",
    operationId: "listAgents",
    tag: "agents",
    summary: "The tenant's live agents at their latest versions, by name, keyset-paginated",
    description: "Archived agents are left out (GET /v1/agents/{name} still reads one).",
    auth: "bearer",
    query: ListAgentsQuerySchema,
    responses: [{ status: 200, description: "One page; `next_cursor` is null on the last.", schema: AgentPageSchema }],
    errors: ["invalid_request", ...V1_ERRORS],
    handler: async (c, input) => {
      const query = input.query();
      const after = decodeCursor(query.cursor, "string");
      const db = c.get("deps").db();
      const page = await callDependency("postgres", () =>
        listAgents(db, c.get("tenantId"), { limit: query.limit, after }),
      );
      return c.json({ agents: page.agents, next_cursor: page.more && page.last ? encodeCursor(page.last) : null });
    },
  }),
  route({
    method: "get",
    path: "/:name",
    operationId: "getAgent",
    tag: "agents",
    summary: "An agent's latest version",
    auth: "bearer",
    parameters: [agentNameParam],
    responses: [{ status: 200, description: "The latest version.", schema: AgentAnswerSchema }],
    errors: ["not_found", ...V1_ERRORS],
    handler: async (c) => {
      const name = agentName(c.req.param("name"));
      const db = c.get("deps").db();
      const found = await callDependency("postgres", () => getAgentVersion(db, c.get("tenantId"), name, null));
      if (!found) throw notFoundAgent(name);
      return c.json({ agent: found.view });
    },
  }),
  route({
    method: "get",
    path: "/:name/versions",
    operationId: "listAgentVersions",
    tag: "agents",
    summary: "An agent's versions, newest first, keyset-paginated",
    auth: "bearer",
    parameters: [agentNameParam],
    query: ListAgentsQuerySchema,
    responses: [
      { status: 200, description: "One page; `next_cursor` is null on the last.", schema: AgentVersionPageSchema },
    ],
    errors: ["invalid_request", "not_found", ...V1_ERRORS],
    handler: async (c, input) => {
      const name = agentName(c.req.param("name"));
      const query = input.query();
      const before = decodeCursor(query.cursor, "number");
      const db = c.get("deps").db();
      const page = await callDependency("postgres", () =>
        listAgentVersions(db, c.get("tenantId"), name, { limit: query.limit, before }),
      );
      if (!page) throw notFoundAgent(name);
      const last = page.versions[page.versions.length - 1];
      return c.json({ versions: page.versions, next_cursor: page.more && last ? encodeCursor(last.version) : null });
    },
  }),
  route({
    method: "get",
    path: "/:name/versions/:version",
    operationId: "getAgentVersion",
    tag: "agents",
    summary: "One version of an agent",
    auth: "bearer",
    parameters: [agentNameParam, agentVersionParam],
    responses: [{ status: 200, description: "The version.", schema: AgentAnswerSchema }],
    errors: ["not_found", ...V1_ERRORS],
    handler: async (c) => {
      const name = agentName(c.req.param("name"));
      const version = versionParam(c.req.param("version"));
      const db = c.get("deps").db();
      const found = await callDependency("postgres", () => getAgentVersion(db, c.get("tenantId"), name, version));
      if (!found) throw new ApiError("not_found", `agent "${name}" has no version ${version}`);
      return c.json({ agent: found.view });
    },
  }),
  route({
    method: "post",
    path: "/:name/versions",
    operationId: "createAgentVersion",
    tag: "agents",
    summary: "Store the agent's next version (the whole definition; versions are never edited)",
    description:
      "Checked as POST /v1/agents checks a definition (model, response_format, mcp_servers). Jobs naming the agent without a version run this one from now on; jobs already submitted keep theirs. An archived agent takes no new versions (409 `conflict`); past the cap on versions per agent or the tenant's cap on definition bytes (docs/limits.md) a 409 `agent_limit_reached`.",
    auth: "bearer",
    parameters: [agentNameParam],
    body: AgentDefinitionSchema,
    responses: [{ status: 201, description: "The new version.", schema: AgentAnswerSchema }],
    errors: [...BODY_ERRORS, "not_found", "conflict", "agent_limit_reached", ...V1_ERRORS],
    handler: async (c, input) => {
      const name = agentName(c.req.param("name"));
      const config = c.get("config");
      const definition = await input.body();
      checkDefinition(config, c.get("tenantId"), definition);
      const db = c.get("deps").db();
      await checkToolNames(db, definition);
      const result = await callDependency("postgres", () =>
        createAgentVersion(db, c.get("tenantId"), name, definition, agentCaps(config)),
      );
      if ("ok" in result) return c.json({ agent: result.ok.view }, 201);
      if ("limit" in result) throw capReached(config, result.limit, name);
      if ("archived" in result) throw new ApiError("conflict", `agent "${name}" is archived; it takes no new versions`);
      throw notFoundAgent(name);
    },
  }),
  route({
    method: "post",
    path: "/:name/archive",
    operationId: "archiveAgent",
    tag: "agents",
    summary: "Archive an agent (no body; repeating is harmless)",
    description:
      "No new job or version may name it (409 `conflict`); its versions stay readable and jobs already submitted run on.",
    auth: "bearer",
    parameters: [agentNameParam],
    responses: [{ status: 200, description: "The latest version, with `archived_at` set.", schema: AgentAnswerSchema }],
    errors: ["not_found", ...V1_ERRORS],
    handler: async (c) => {
      const name = agentName(c.req.param("name"));
      const db = c.get("deps").db();
      const archived = await callDependency("postgres", () => archiveAgent(db, c.get("tenantId"), name));
      if (!archived) throw notFoundAgent(name);
      return c.json({ agent: archived.view });
    },
  }),
);
