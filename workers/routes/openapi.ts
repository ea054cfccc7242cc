/**
 * GET /openapi.json — the OpenAPI 3.1 document built from src/contracts. No key: it describes
 * the API, it grants nothing. Built on the first request and kept for the isolate's life (it
 * depends only on code, so it cannot go stale within one deployment).
 */
import { Hono } from "hono";
import { buildOpenApiDocument } from "../../src/contracts/openapi";
import type { GatewayEnv } from "../types";

let cached: string | undefined;

export const openApiRoutes = new Hono<GatewayEnv>().get("/openapi.json", (c) => {
  cached ??= JSON.stringify(buildOpenApiDocument());
  return c.body(cached, 200, { "content-type": "application/json; charset=UTF-8" });
});
