/**
 * GET /v1/models (the models this tenant may name, from the operator's registry) and GET
 * /v1/usage (the tenant's tokens per UTC day and model).
 */
import { Hono } from "hono";
import { UsageQuerySchema } from "../../src/contracts/catalog";
import { usageByDay } from "../../src/db/usage-repo";
import { tenantModelLimit } from "../../src/domain/models";
import { modelsFor } from "../commands/models";
import { callDependency } from "../deps";
import { validate } from "../request/body";
import type { GatewayEnv } from "../types";

export const modelRoutes = new Hono<GatewayEnv>().get("/", (c) => {
  const tenantId = c.get("tenantId");
  const catalog = c.get("config").models;
  const deploymentDefault = catalog.entries[0]?.name;
  return c.json({
    models: modelsFor(catalog, tenantId).map((e) => ({
      name: e.name,
      default: e.name === deploymentDefault,
      tenant_concurrency: tenantModelLimit(e, tenantId),
    })),
  });
});

export const usageRoutes = new Hono<GatewayEnv>().get("/", async (c) => {
  const query = validate(UsageQuerySchema, c.req.query());
  const db = c.get("deps").db();
  const usage = await callDependency("postgres", () => usageByDay(db, c.get("tenantId"), query.from, query.to));
  return c.json({ from: query.from, to: query.to, usage });
});
