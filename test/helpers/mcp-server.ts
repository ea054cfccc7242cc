/**
 * A real MCP server for tests, built with the official SDK (`McpServer` and its Streamable HTTP
 * transport, stateful sessions) on a loopback node:http server. It records every tools/call as
 * received (HTTP headers and `_meta`), every session's initialize headers, and every call whose
 * handler saw its abort signal fire (the SDK aborts it on `notifications/cancelled`), so a test
 * can prove what reached the server and that a cancel did. Every HTTP request's path and headers
 * are kept too (`requests`), so a test can prove which paths a secret reached.
 */
import { randomUUID } from "node:crypto";
import { createServer, type IncomingHttpHeaders } from "node:http";
import type { AddressInfo } from "node:net";
import { McpServer } from "@modelcontextprotocol/sdk/server/mcp.js";
import { StreamableHTTPServerTransport } from "@modelcontextprotocol/sdk/server/streamableHttp.js";
import { z } from "zod";

/** The size of the `big` tool's text: the result that once cost a host 180 MB of memory. */
export const BIG_RESULT_CHARS = 30 * 1024 * 1024;

export interface RecordedCall {
  tool: string;
  args: unknown;
  headers: IncomingHttpHeaders;
  meta: Record<string, unknown> | undefined;
  at: number;
  /** Set when the handler's signal fired (the client cancelled): Date.now() then, and the reason. */
  aborted?: { at: number; reason: string };
}

export interface TestMcpServer {
  /** The MCP endpoint, `http://127.0.0.1:<port>/mcp`. */
  url: string;
  calls: RecordedCall[];
  /** Headers of each session's initialize request. */
  sessions: IncomingHttpHeaders[];
  /** Sessions ended by the client (HTTP DELETE). */
  deleted: number;
  /** Every HTTP request, in order: its path and headers. */
  requests: Array<{ path: string; headers: IncomingHttpHeaders }>;
  close(): Promise<void>;
}

/**
 * The tools it offers: `echo`, `slow` (waits until cancelled, up to 60 s), `charge` (hangs the
 * first time per idempotency key, answers at once when asked again with it), `fail` (isError),
 * `whoami` (answers with the Authorization header it got), `hidden`, `big` (a text result of
 * BIG_RESULT_CHARS characters, as a server dumping a whole table would).
 */
function buildServer(record: (c: RecordedCall) => RecordedCall, charged: Set<string>): McpServer {
  const server = new McpServer({ name: "test-mcp", version: "1.0.0" });
  const seen = (
    tool: string,
    args: unknown,
    extra: { requestInfo?: { headers: IncomingHttpHeaders }; _meta?: unknown },
  ) =>
    record({
      tool,
      args,
      headers: extra.requestInfo?.headers ?? {},
      meta: extra._meta as Record<string, unknown> | undefined,
      at: Date.now(),
    });
  server.registerTool(
    "echo",
    { description: "Echo the text back.", inputSchema: { text: z.string().describe("what to echo") } },
    async (args, extra) => {
      seen("echo", args, extra as never);
      return { content: [{ type: "text", text: `echo: ${args.text}` }] };
    },
  );
  server.registerTool("slow", { description: "Takes a minute.", inputSchema: {} }, async (args, extra) => {
    const call = seen("slow", args, extra as never);
    await new Promise<void>((resolve) => {
      const timer = setTimeout(resolve, 60_000);
      extra.signal.addEventListener("abort", () => {
        call.aborted = { at: Date.now(), reason: String(extra.signal.reason) };
        clearTimeout(timer);
        resolve();
      });
    });
    return { content: [{ type: "text", text: "slow done" }] };
  });
  // A side effect that hangs the first time it is asked under an idempotency key (the host is
  // killed meanwhile, in the recovery tests) and answers at once when asked again under the same key.
  server.registerTool("charge", { description: "Charges a card.", inputSchema: {} }, async (args, extra) => {
    const call = seen("charge", args, extra as never);
    const key = String(call.headers["x-ear-idempotency-key"]);
    if (!charged.has(key)) {
      charged.add(key);
      await new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, 60_000);
        extra.signal.addEventListener("abort", () => {
          clearTimeout(timer);
          resolve();
        });
      });
    }
    return { content: [{ type: "text", text: `charged once under ${key}` }] };
  });
  server.registerTool("fail", { description: "Always fails.", inputSchema: {} }, async (args, extra) => {
    seen("fail", args, extra as never);
    return { isError: true, content: [{ type: "text", text: "the widget is broken" }] };
  });
  // Echoes the request's Authorization header back, as a careless debug tool would.
  server.registerTool("whoami", { description: "Who am I?", inputSchema: {} }, async (args, extra) => {
    const call = seen("whoami", args, extra as never);
    return { content: [{ type: "text", text: `authorization: ${String(call.headers.authorization)}` }] };
  });
  server.registerTool("big", { description: "A 30 MB answer.", inputSchema: {} }, async (args, extra) => {
    seen("big", args, extra as never);
    return { content: [{ type: "text", text: "x".repeat(BIG_RESULT_CHARS) }] };
  });
  server.registerTool("hidden", { description: "Not for the model.", inputSchema: {} }, async (args, extra) => {
    seen("hidden", args, extra as never);
    return { content: [{ type: "text", text: "hidden ran" }] };
  });
  return server;
}

export async function startTestMcpServer(): Promise<TestMcpServer> {
  const calls: RecordedCall[] = [];
  // Idempotency keys `charge` was asked under, across sessions (a recovered run opens its own).
  const charged = new Set<string>();
  const sessions: IncomingHttpHeaders[] = [];
  const transports = new Map<string, StreamableHTTPServerTransport>();
  const state = { deleted: 0 };
  const record = (c: RecordedCall) => {
    calls.push(c);
    return c;
  };
  const requests: TestMcpServer["requests"] = [];
  const http = createServer(async (req, res) => {
    requests.push({ path: req.url ?? "", headers: req.headers });
    // `<url>/r`: a same-origin redirect out of the MCP path, to `/admin/mcp` (where this server
    // also answers MCP, as an internal endpoint a tenant must not reach would).
    if (req.url?.endsWith("/mcp/r")) {
      res.writeHead(307, { location: "/admin/mcp" }).end();
      return;
    }
    // `<url>/reject`: a 401 whose body echoes the Authorization header, as a careless server would.
    if (req.url?.endsWith("/reject")) {
      res.writeHead(401, { "content-type": "text/plain" }).end(`bad token: ${String(req.headers.authorization)}`);
      return;
    }
    try {
      const chunks: Buffer[] = [];
      for await (const c of req) chunks.push(c as Buffer);
      const raw = Buffer.concat(chunks).toString("utf8");
      const body = raw ? JSON.parse(raw) : undefined;
      const sid = req.headers["mcp-session-id"];
      let transport = typeof sid === "string" ? transports.get(sid) : undefined;
      if (!transport) {
        if (req.method !== "POST" || body?.method !== "initialize") {
          res.writeHead(typeof sid === "string" ? 404 : 400).end();
          return;
        }
        sessions.push(req.headers);
        const t: StreamableHTTPServerTransport = new StreamableHTTPServerTransport({
          sessionIdGenerator: () => randomUUID(),
          onsessioninitialized: (id) => {
            transports.set(id, t);
          },
        });
        t.onclose = () => {
          if (t.sessionId) transports.delete(t.sessionId);
        };
        await buildServer(record, charged).connect(t);
        transport = t;
      }
      if (req.method === "DELETE") state.deleted++;
      await transport.handleRequest(req, res, body);
    } catch (err) {
      if (!res.headersSent) res.writeHead(500).end(String(err));
    }
  });
  await new Promise<void>((r) => http.listen(0, "127.0.0.1", r));
  const { port } = http.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}/mcp`,
    calls,
    sessions,
    requests,
    get deleted() {
      return state.deleted;
    },
    async close() {
      await Promise.all([...transports.values()].map((t) => t.close().catch(() => {})));
      http.closeAllConnections();
      await new Promise<void>((r) => http.close(() => r()));
    },
  };
}
