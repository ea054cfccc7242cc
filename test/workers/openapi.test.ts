/**
 * GET /openapi.json is the document generated from the app's route declarations
 * (workers/routes/route.ts), and it covers the app's routes exactly: a handler registered
 * without a declaration (a plain `.get(…)`), or an operation without a route, fails here.
 * (The document's validity is test/unit/openapi.test.ts: the OpenAPI validator is a Node tool
 * that reads its meta-schemas from disk, which it cannot do inside workerd.)
 */
import { describe, expect, it } from "vitest";
import { CHAT_ERROR_CODES } from "../../src/contracts/chat";
import { ERROR_STATUS } from "../../src/contracts/errors";
import { EVENT_TYPES } from "../../src/contracts/events";
import { createApp } from "../../workers/app";
import { openApiDocument } from "../../workers/routes/openapi";
import { gateway } from "./helpers";

const BASE = "http://gateway.test";

type Doc = { paths: Record<string, Record<string, unknown>> };
// biome-ignore lint/suspicious/noExplicitAny: walking a parsed JSON document
type Json = any;

/**
 * "METHOD /path" of every handler the app registers, in OpenAPI's spelling (`/:id` → `/{id}`, `/:path{.+}` → `/{path}`).
 * Middleware (`app.use`) registers as method ALL on a wildcard path; it is not an operation.
 */
function appRoutes(app: { routes: { method: string; path: string }[] }): string[] {
  const out = new Set<string>();
  for (const r of app.routes) {
    if (r.method === "ALL" && r.path.endsWith("*")) continue;
    out.add(`${r.method} ${r.path.replace(/:([A-Za-z0-9_]+)(\{[^}]*\})?/g, "{$1}")}`);
  }
  return [...out].sort();
}

function documentOperations(doc: Doc): string[] {
  return Object.entries(doc.paths)
    .flatMap(([path, item]) => Object.keys(item).map((m) => `${m.toUpperCase()} ${path}`))
    .sort();
}

function mismatch(routes: string[], operations: string[]) {
  return {
    routesWithoutOperation: routes.filter((r) => !operations.includes(r)),
    operationsWithoutRoute: operations.filter((o) => !routes.includes(o)),
  };
}

describe("GET /openapi.json", () => {
  it("serves the document generated from the app, without a key, the same on every request", async () => {
    const first = await gateway.fetch(`${BASE}/openapi.json`);
    expect(first.status).toBe(200);
    expect(first.headers.get("content-type")).toMatch(/^application\/json/);
    const text = await first.text();
    expect(JSON.parse(text)).toEqual(JSON.parse(JSON.stringify(openApiDocument(createApp()))));
    const again = await gateway.fetch(`${BASE}/openapi.json`);
    expect(await again.text()).toBe(text);
  });

  it("has one operation per route of the app, and no operation without a route", async () => {
    const doc = (await (await gateway.fetch(`${BASE}/openapi.json`)).json()) as Doc;
    const routes = appRoutes(createApp());
    expect(routes.length).toBeGreaterThanOrEqual(13);
    expect(mismatch(routes, documentOperations(doc))).toEqual({
      routesWithoutOperation: [],
      operationsWithoutRoute: [],
    });
  });

  it("the route check fails for a route missing from the document and for an operation with no route", () => {
    const doc = openApiDocument(createApp()) as Doc;
    const routes = appRoutes(createApp());
    delete doc.paths["/v1/jobs/{id}/inputs"];
    doc.paths["/v1/jobs/{id}/retry"] = { post: {} };
    expect(mismatch(routes, documentOperations(doc))).toEqual({
      routesWithoutOperation: ["GET /v1/jobs/{id}/inputs"],
      operationsWithoutRoute: ["POST /v1/jobs/{id}/retry"],
    });
  });

  it("names every error code, event type and chat error code of the contracts", async () => {
    const text = await (await gateway.fetch(`${BASE}/openapi.json`)).text();
    const doc = JSON.parse(text) as {
      paths: Record<string, Record<string, Json>>;
      components: { schemas: { ErrorBody: Json; EventEnvelope: Json } };
    };
    expect(doc.components.schemas.ErrorBody.properties.error.properties.code.enum).toEqual(Object.keys(ERROR_STATUS));
    expect(doc.components.schemas.EventEnvelope.properties.type.enum).toEqual([...EVENT_TYPES]);
    const socket = doc.paths["/v1/conversations/{id}/ws"]?.get["x-websocket"];
    expect(socket["error-frame-codes"]).toEqual([...CHAT_ERROR_CODES]);
    expect(socket["server-frames"]).toEqual({ $ref: "#/components/schemas/ServerFrame" });
  });
});
