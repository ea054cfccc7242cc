/**
 * An MCP server's `outputSchema` never runs on the host's event loop (the
 * server, chosen by the tenant, picks the schema and the content, so its cost is the tenant's). The SDK's client would
 * compile it with Ajv and test `structuredContent` against it synchronously; a `pattern` of
 * `(a+)+$` against 28 `a` and a `!` then holds the loop for seconds. A hand-written Streamable
 * HTTP server on loopback (the SDK's own server would check its output itself, in this process)
 * offers such a tool; the call returns at once, with the content as sent, and the loop keeps
 * ticking.
 */
import { randomUUID } from "node:crypto";
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { silentLogger } from "../../sandbox-host/log";
import { McpToolset } from "../../sandbox-host/mcp/toolset";
import { McpServerSchema } from "../../src/contracts/agent";
import { parseAllowedUrls } from "../../src/domain/mcp";
import { measureLoopGap } from "../helpers/loop-gap";

const EVIL = { s: `${"a".repeat(28)}!` };

let server: Server;
let url: string;

beforeAll(async () => {
  server = createServer((req, res) => {
    if (req.method !== "POST") return void res.writeHead(405).end();
    let body = "";
    req.on("data", (c) => (body += c));
    req.on("end", () => {
      const msg = JSON.parse(body) as { id?: number; method: string };
      if (msg.id === undefined) return void res.writeHead(202).end();
      const result =
        msg.method === "initialize"
          ? { protocolVersion: "2025-06-18", capabilities: { tools: {} }, serverInfo: { name: "evil", version: "1" } }
          : msg.method === "tools/list"
            ? {
                tools: [
                  {
                    name: "echo",
                    inputSchema: { type: "object" },
                    outputSchema: { type: "object", properties: { s: { type: "string", pattern: "(a+)+$" } } },
                  },
                ],
              }
            : { content: [{ type: "text", text: "done" }], structuredContent: EVIL };
      res
        .writeHead(200, { "content-type": "application/json", "mcp-session-id": "s1" })
        .end(JSON.stringify({ jsonrpc: "2.0", id: msg.id, result }));
    });
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/mcp`;
});
afterAll(() => new Promise<void>((r) => server.close(() => r())));

describe("an MCP tool's outputSchema", () => {
  it("is not evaluated on the host's loop: a backtracking pattern costs nothing, the content passes as sent", async () => {
    const allowed = parseAllowedUrls(url);
    if (typeof allowed === "string") throw new Error(allowed);
    const id = { jobId: randomUUID(), epoch: 1, token: "tok", host: "h", executionId: randomUUID() };
    const signal = new AbortController().signal;
    const toolset = await McpToolset.open(
      [McpServerSchema.parse({ name: "evil", url, tools: ["echo"] })],
      { allowedUrls: allowed, secrets: new Map() },
      id,
      "acme",
      signal,
      silentLogger,
    );
    const {
      result,
      tookMs: took,
      worstGapMs: worstGap,
    } = await measureLoopGap(() => toolset.call("evil__echo", {}, "call-1", signal));
    await toolset.close();
    expect(result).toMatchObject({ ok: true, output: { structured_content: EVIL } });
    expect(took).toBeLessThan(500);
    expect(worstGap).toBeLessThan(300);
  }, 60_000);
});
