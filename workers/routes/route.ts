/**
 * One declaration per route: its method and path, what it reads (a JSON body, a query) and
 * answers (responses by status, error codes), and its handler. `routes(...)` registers each on a
 * Hono app with the declaration attached to its handler, and `operationsOf` reads them back from
 * the app's routes, so GET /openapi.json is generated from the app itself (src/contracts/openapi.ts)
 * and cannot list a route the app does not serve.
 *
 * We chose this over @hono/zod-openapi and hono-openapi (docs/architecture.md "The OpenAPI
 * document"): both validate a body through Hono's validator, which parses `c.req.json()` with no
 * byte cap before the parse and answers its own 400 shape, so our body reader would have stayed
 * beside theirs; @hono/zod-openapi also converts with @asteasolutions/zod-to-openapi instead of
 * zod's own z.toJSONSchema, which the document and the hosts already use.
 *
 * A body or query is parsed with the declared schema when the handler asks for it
 * (`input.body()`, `input.query()`), so each handler keeps its order of checks (a malformed name
 * answers 404 before a bad body answers 400).
 */
import { type Context, Hono } from "hono";
import type { z } from "zod";
import type { Operation, OperationSpec } from "../../src/contracts/openapi";
import { readJsonBody, validate } from "../request/body";
import type { GatewayEnv } from "../types";

export interface RouteInput<B, Q> {
  /** The body, read by workers/request/body.ts (cap, content-type, UTF-8, JSON, zod: ApiError 4xx). */
  body: () => Promise<B extends z.ZodType ? z.output<B> : never>;
  /** The query, validated (400 invalid_request naming the field). */
  query: () => Q extends z.ZodType ? z.output<Q> : never;
}

export interface Route<P extends string, B extends z.ZodType | undefined, Q extends z.ZodObject | undefined>
  extends OperationSpec {
  /** Hono's path, under where the app mounts the group (`/:id/cancel`). */
  path: P;
  body?: B;
  query?: Q;
  handler: (c: Context<GatewayEnv, P>, input: RouteInput<B, Q>) => Response | Promise<Response>;
}

// biome-ignore lint/suspicious/noExplicitAny: a declared route of any path, body and query
type AnyRoute = Route<any, any, any>;

const DECLARED = Symbol("route declaration");

/** Declares a route (typed: the handler's params, body and query follow from the declaration). */
export function route<
  P extends string,
  B extends z.ZodType | undefined = undefined,
  Q extends z.ZodObject | undefined = undefined,
>(declaration: Route<P, B, Q>): Route<P, B, Q> {
  return declaration;
}

/** A Hono app serving these routes, each handler carrying its declaration. */
export function routes(...declared: AnyRoute[]): Hono<GatewayEnv> {
  const app = new Hono<GatewayEnv>();
  for (const r of declared) {
    const handler = (c: Context<GatewayEnv>) =>
      r.handler(c, {
        body: () => {
          if (!r.body) throw new Error(`${r.operationId} declares no body`);
          return readJsonBody(c.req.raw, r.body, c.get("config").maxBodyBytes);
        },
        query: () => {
          if (!r.query) throw new Error(`${r.operationId} declares no query`);
          return validate(r.query, c.req.query());
        },
      });
    app.on(r.method.toUpperCase(), r.path, Object.assign(handler, { [DECLARED]: r }));
  }
  return app;
}

/**
 * The operations of every declared route the app serves, at the path it serves it (`/:id` as
 * `{id}`, `/:path{.+}` as `{path}`). Middleware and undeclared handlers carry no declaration; test/workers/openapi.test.ts
 * fails on an undeclared route.
 */
export function operationsOf(app: Hono<GatewayEnv>): Operation[] {
  const out: Operation[] = [];
  for (const r of app.routes) {
    const declared = (r.handler as { [DECLARED]?: AnyRoute })[DECLARED];
    if (!declared) continue;
    const { handler: _, path: __, ...spec } = declared;
    out.push({ ...spec, path: r.path.replace(/:([A-Za-z0-9_]+)(\{[^}]*\})?/g, "{$1}") });
  }
  return out;
}
