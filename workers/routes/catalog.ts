/**
 * GET /v1/models (the models this tenant may name, from the operator's registry), GET /v1/tools
 * (the built-in sandbox tools and the hosts' code tools an agent may list) and GET /v1/usage
 * (the tenant's tokens per UTC day and model).
 */
import { ModelListSchema, ToolListSchema, UsageAnswerSchema, UsageQuerySchema } from "../../src/contracts/catalog";
import { V1_ERRORS } from "../../src/contracts/openapi";
import { sandboxToolSpecs } from "../../src/contracts/sandbox-tools";
import { listCodeTools } from "../../src/db/code-tools-repo";
import { usageByDay, usageHealth } from "../../src/db/usage-repo";
import { modelsOfferedTo } from "../../src/domain/job-admission";
import { tenantModelLimit } from "../../src/domain/models";
import { callDependency } from "../deps";
import { route, routes } from "./route";

export const modelRoutes = routes(
  route({
    method: "get",
    path: "/",
    operationId: "listModels",
    tag: "models",
    summary: "The models this tenant may name (as a job's `model` or an agent's)",
    auth: "bearer",
    responses: [{ status: 200, description: "The models, the deployment's default first.", schema: ModelListSchema }],
    errors: V1_ERRORS,
    handler: (c) => {
      const tenantId = c.get("tenantId");
      const catalog = c.get("config").models;
      const deploymentDefault = catalog.entries[0]?.name;
      return c.json({
        models: modelsOfferedTo(catalog, tenantId).map((e) => ({
          name: e.name,
          default: e.name === deploymentDefault,
          tenant_concurrency: tenantModelLimit(e, tenantId),
          pricing: e.pricing
            ? { input_usd_per_mtok: e.pricing.inputUsdPerMtok, output_usd_per_mtok: e.pricing.outputUsdPerMtok }
            : null,
        })),
      });
    },
  }),
);

/** The sandbox tools' JSON Schemas, converted once per isolate. */
let sandboxTools: ReturnType<typeof sandboxToolSpecs> | undefined;

export const toolRoutes = routes(
  route({
    method: "get",
    path: "/",
    operationId: "listTools",
    tag: "models",
    summary: "The tools an agent may list in `tools`: the sandbox tools, then the hosts' code tools by name",
    description:
      "Code tools are the operator's (the hosts' HOST_TOOLS modules), the same for every tenant; a host publishes its own when it starts and removes them when it stops. An agent naming a tool that is neither here nor built in is a 400.",
    auth: "bearer",
    responses: [{ status: 200, description: "The tools.", schema: ToolListSchema }],
    errors: V1_ERRORS,
    handler: async (c) => {
      const db = c.get("deps").db();
      const code = await callDependency("postgres", () => listCodeTools(db));
      sandboxTools ??= sandboxToolSpecs();
      return c.json({
        tools: [
          ...sandboxTools.map((t) => ({
            ...t,
            kind: "sandbox" as const,
            idempotent: false,
            requires_approval: false,
            timeout_ms: null,
            hosts: null,
          })),
          ...code.map((t) => ({ ...t, kind: "code" as const })),
        ],
      });
    },
  }),
);

export const usageRoutes = routes(
  route({
    method: "get",
    path: "/",
    operationId: "getUsage",
    tag: "models",
    summary: "The tenant's tokens, model calls and cost per UTC day and model, with spend, jobs, latency and errors",
    description:
      "`from` and `to` are UTC days (YYYY-MM-DD), both included, at most 366 days apart. Only days with usage appear.",
    auth: "bearer",
    query: UsageQuerySchema,
    responses: [{ status: 200, description: "The usage.", schema: UsageAnswerSchema }],
    errors: ["invalid_request", ...V1_ERRORS],
    handler: async (c, input) => {
      const query = input.query();
      const db = c.get("deps").db();
      const tenant = c.get("tenantId");
      const [usage, health] = await callDependency("postgres", () =>
        Promise.all([usageByDay(db, tenant, query.from, query.to), usageHealth(db, tenant, query.from, query.to)]),
      );
      return c.json({ from: query.from, to: query.to, usage, ...health });
    },
  }),
);
