/**
 * GET /openapi.json — the OpenAPI 3.1 document generated from the app's own route declarations
 * (route.ts). No key: it describes the API, it grants nothing. Built on the first request and
 * kept for the isolate's life (it depends only on code, so it cannot go stale within one
 * deployment); by then every route of the app is registered.
 */
import type { Hono } from "hono";
import { buildOpenApiDocument } from "../../src/contracts/openapi";
import type { GatewayEnv } from "../types";
import { operationsOf, route, routes } from "./route";

/** The document of this app's declared routes. */
export function openApiDocument(app: Hono<GatewayEnv>): Record<string, unknown> {
  return buildOpenApiDocument(operationsOf(app));
}

export function openApiRoutes(app: Hono<GatewayEnv>): Hono<GatewayEnv> {
  let cached: string | undefined;
  return routes(
    route({
      method: "get",
      path: "/openapi.json",
      operationId: "openapi",
      tag: "health",
      summary: "This document (OpenAPI 3.1, generated from the gateway's routes and src/contracts)",
      auth: "none",
      responses: [{ status: 200, description: "The OpenAPI document.", schema: { type: "object" } }],
      errors: ["internal"],
      handler: (c) => {
        cached ??= JSON.stringify(openApiDocument(app));
        return c.body(cached, 200, { "content-type": "application/json; charset=UTF-8" });
      },
    }),
  );
}
