/**
 * The MCP transport's fetch (sandbox-host/mcp/fetch.ts) against a real loopback HTTP server:
 * no request outside MCP_ALLOWED_URLS is sent, and each answer is read only to
 * MCP_MESSAGE_MAX_BYTES per message, in each of its shapes (a JSON body, an SSE answer to a
 * request, the session's GET stream, an error page). The SDK end to end: mcp-tools.test.ts.
 */
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  MCP_MESSAGE_MAX_BYTES,
  MCP_TOO_LARGE_CODE,
  McpResponseTooLarge,
  McpUrlRefused,
  mcpTransportFetch,
  tooLargeMessage,
} from "../../sandbox-host/mcp/fetch";
import type { McpServer } from "../../src/contracts/agent";
import { parseAllowedUrls } from "../../src/domain/mcp";

const OVER = "x".repeat(MCP_MESSAGE_MAX_BYTES + 1024 * 1024);
let http: Server;
let base: string;
const seen: string[] = [];

beforeAll(async () => {
  http = createServer((req, res) => {
    seen.push(req.url ?? "");
    req.resume();
    if (req.url === "/mcp/json") res.writeHead(200, { "content-type": "application/json" }).end(`"${OVER}"`);
    else if (req.url === "/mcp/sse") {
      res.writeHead(200, { "content-type": "text/event-stream" });
      res.end(`data: {"a":1}\n\ndata: ${OVER}\n\ndata: {"b":2}\r\n\r\n`);
    } else if (req.url === "/mcp/err") res.writeHead(500, { "content-type": "text/plain" }).end(OVER);
    else res.writeHead(404).end();
  });
  await new Promise<void>((r) => http.listen(0, "127.0.0.1", r));
  base = `http://127.0.0.1:${(http.address() as AddressInfo).port}`;
});
afterAll(async () => {
  http.closeAllConnections();
  await new Promise<void>((r) => http.close(() => r()));
});

const transportFetch = () => {
  const allowed = parseAllowedUrls(`${base}/mcp`);
  if (typeof allowed === "string") throw new Error(allowed);
  return mcpTransportFetch({ name: "s" } as McpServer, allowed);
};
const request = (id: number) => ({
  method: "POST",
  body: JSON.stringify({ jsonrpc: "2.0", id, method: "tools/call", params: { name: "t" } }),
});

describe("the MCP transport's fetch", () => {
  it("sends nothing outside MCP_ALLOWED_URLS (a redirect's target is fetched through it too)", async () => {
    const before = seen.length;
    await expect(transportFetch()(`${base}/admin/mcp?x=1`, request(1))).rejects.toThrow(
      new McpUrlRefused(
        `MCP server "s" redirected to ${base}/admin/mcp, which is not a URL the operator allows MCP calls to (MCP_ALLOWED_URLS): not followed`,
      ),
    );
    expect(seen.length).toBe(before);
  });

  it("fails a JSON answer past the bound while reading it", async () => {
    const res = await transportFetch()(`${base}/mcp/json`, request(2));
    await expect(res.json()).rejects.toThrow(McpResponseTooLarge);
  });

  it("ends an SSE answer to a request with a JSON-RPC error for it at the over-long event", async () => {
    const text = await (await transportFetch()(`${base}/mcp/sse`, request(3))).text();
    expect(text.startsWith('data: {"a":1}\n\n')).toBe(true);
    expect(text.length).toBeLessThan(MCP_MESSAGE_MAX_BYTES + 512 * 1024);
    const answer = { jsonrpc: "2.0", id: 3, error: { code: MCP_TOO_LARGE_CODE, message: tooLargeMessage("s") } };
    expect(text.endsWith(`\n\nevent: message\ndata: ${JSON.stringify(answer)}\n\n`)).toBe(true);
    expect(text).not.toContain('{"b":2}');
  });

  it("drops an over-long event of the GET stream and passes the events around it", async () => {
    const text = await (await transportFetch()(`${base}/mcp/sse`, { method: "GET" })).text();
    expect(text.startsWith('data: {"a":1}\n\n')).toBe(true);
    expect(text.endsWith('\n\ndata: {"b":2}\r\n\r\n')).toBe(true);
    expect(text.length).toBeLessThan(MCP_MESSAGE_MAX_BYTES + 512 * 1024);
  });

  it("cuts an error page at the bound (its start is the message)", async () => {
    const res = await transportFetch()(`${base}/mcp/err`, { method: "GET" });
    expect(res.status).toBe(500);
    expect(await res.text()).toBe(OVER.slice(0, MCP_MESSAGE_MAX_BYTES));
  });
});
