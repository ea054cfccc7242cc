/**
 * The gateway's OpenAPI document, generated in Node from the app itself (createApp → its route
 * declarations), for the checks that need Node: the OpenAPI validator reads meta-schemas from
 * disk, openapi-typescript and tsc run as tools. The app's types need @cloudflare/workers-types,
 * which tsconfig.node.json cannot load beside @types/node, so the app is imported by a path tsc
 * does not follow; test/workers/openapi.test.ts type-checks the app and serves this same document
 * from workerd. The app imports no Durable Object class (routes reach the objects through their
 * namespaces and workers/durable-objects/rpc.ts), so nothing here needs `cloudflare:workers`.
 */
export async function gatewayOpenApiDocument(): Promise<Record<string, unknown>> {
  const [appPath, openApiPath] = ["../../workers/app", "../../workers/routes/openapi"];
  const { createApp } = (await import(appPath)) as { createApp: () => unknown };
  const { openApiDocument } = (await import(openApiPath)) as {
    openApiDocument: (app: unknown) => Record<string, unknown>;
  };
  return openApiDocument(createApp());
}
