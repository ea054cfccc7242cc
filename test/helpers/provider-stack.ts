/**
 * A whole local stack for one describe block whose model is the test's own provider
 * (fake-provider.ts, scripted per request, model name `fake-model`) and whose agents may use a
 * recording MCP server (mcp-server.ts), allowed on the gateway and the hosts: started before the
 * block's tests, stopped after them. `server(tools)` is an agent's `mcp_servers` entry for it.
 */
import { afterAll, beforeAll, expect } from "vitest";
import { type Stack, type StackOptions, startStack } from "../../tools/stack/start";
import { testPool } from "./db";
import { type FakeProvider, type ProviderScript, startFakeProvider } from "./fake-provider";
import { startTestMcpServer, type TestMcpServer } from "./mcp-server";
import { started } from "./stack";

export interface ProviderStack {
  readonly stack: Stack;
  readonly provider: FakeProvider;
  readonly mcp: TestMcpServer;
  readonly pool: ReturnType<typeof testPool>;
  server(tools: unknown[]): Array<{ name: string; url: string; tools: unknown[] }>;
  /** The job's owner (a host id), or null. */
  ownerOf(jobId: string): Promise<string | null>;
  /** SIGKILL the job's owner, and start one more host so as many stay up for the next case; the owner's id. */
  killOwner(jobId: string): Promise<string | null>;
}

/** `options(allowed)`: the stack's options beside its model, given the MCP endpoint to allow. */
export function useProviderStack(
  script: ProviderScript,
  options: (allowed: string) => Omit<StackOptions, "model">,
): ProviderStack {
  const parts: { stack?: Stack; provider?: FakeProvider; mcp?: TestMcpServer; pool?: ReturnType<typeof testPool> } = {};
  beforeAll(async () => {
    parts.mcp = await startTestMcpServer();
    parts.provider = await startFakeProvider(script);
    const allowed = new URL("/mcp", parts.mcp.url).toString();
    parts.stack = await startStack({
      ...options(allowed),
      model: { baseUrl: parts.provider.url, apiKey: "k", name: "fake-model" },
    });
    parts.pool = testPool(parts.stack.databaseUrl, 2);
  }, 180_000);
  afterAll(async () => {
    await parts.pool?.end();
    await parts.stack?.stop();
    await parts.provider?.close();
    await parts.mcp?.close();
  }, 60_000);
  return {
    get stack() {
      return started(parts.stack);
    },
    get provider() {
      return started(parts.provider);
    },
    get mcp() {
      return started(parts.mcp);
    },
    get pool() {
      return started(parts.pool);
    },
    server: (tools) => [{ name: "files", url: started(parts.mcp).url, tools }],
    ownerOf: async (jobId) =>
      (await started(parts.pool).query<{ owner: string | null }>("select owner from jobs where id = $1", [jobId]))
        .rows[0]?.owner ?? null,
    async killOwner(jobId) {
      const stack = started(parts.stack);
      const owner = await this.ownerOf(jobId);
      const host = stack.hosts.find((h) => h.id === owner);
      expect(host, `owner ${owner} is one of this stack's hosts`).toBeDefined();
      host?.process.kill("SIGKILL");
      await stack.addHost();
      return owner;
    },
  };
}
