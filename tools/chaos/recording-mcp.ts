/**
 * The run chaos harness's MCP server (official SDK, stateless Streamable HTTP on loopback): two
 * tools that take a while, so a SIGKILL lands while a call is in flight, and a record of every
 * call with the identity headers the host sends (`x-ear-job-id`, `x-ear-execution-id`,
 * `x-ear-epoch`, `x-ear-idempotency-key`, docs/tools.md). The checker counts calls per
 * idempotency key: `charge` stands for a side effect that must never run twice, `lookup` for one
 * an agent declares idempotent (called again with the same key after a crash).
 */
import { createServer, type IncomingHttpHeaders } from "node:http";
import type { AddressInfo } from "node:net";
import { McpServer } from "@modelcontextprotocol/sdk/server/mcp.js";
import { StreamableHTTPServerTransport } from "@modelcontextprotocol/sdk/server/streamableHttp.js";
import { z } from "zod";

export interface ToolCallRecord {
  tool: "charge" | "lookup";
  key: string;
  jobId: string;
  executionId: string;
  epoch: number;
  /** Date.now() when the call arrived, and when it answered (or was aborted). */
  startedAt: number;
  endedAt?: number;
  aborted?: boolean;
}

export interface RecordingMcp {
  url: string;
  calls: ToolCallRecord[];
  /** Calls that arrived and have not answered yet. */
  inFlight(): ToolCallRecord[];
  close(): Promise<void>;
}

const header = (h: IncomingHttpHeaders, name: string) => {
  const v = h[name];
  return typeof v === "string" ? v : "";
};

/** @param holdMs how long each call takes (drawn per call). */
export async function startRecordingMcp(holdMs: () => number): Promise<RecordingMcp> {
  const calls: ToolCallRecord[] = [];
  const build = () => {
    const server = new McpServer({ name: "chaos-recorder", version: "1.0.0" });
    const handle =
      (tool: ToolCallRecord["tool"]) =>
      async (
        args: Record<string, unknown>,
        extra: { signal: AbortSignal; requestInfo?: { headers: IncomingHttpHeaders } },
      ) => {
        const h = extra.requestInfo?.headers ?? {};
        const rec: ToolCallRecord = {
          tool,
          key: header(h, "x-ear-idempotency-key"),
          jobId: header(h, "x-ear-job-id"),
          executionId: header(h, "x-ear-execution-id"),
          epoch: Number(header(h, "x-ear-epoch")),
          startedAt: Date.now(),
        };
        calls.push(rec);
        await new Promise<void>((resolve) => {
          const timer = setTimeout(resolve, holdMs());
          extra.signal.addEventListener("abort", () => {
            rec.aborted = true;
            clearTimeout(timer);
            resolve();
          });
        });
        rec.endedAt = Date.now();
        return { content: [{ type: "text" as const, text: `${tool} ok ${JSON.stringify(args)}` }] };
      };
    server.registerTool(
      "charge",
      { description: "Charge a card (never twice).", inputSchema: { amount: z.number() } },
      handle("charge") as never,
    );
    server.registerTool(
      "lookup",
      { description: "Look an order up (safe to repeat).", inputSchema: { q: z.string() } },
      handle("lookup") as never,
    );
    return server;
  };
  const http = createServer(async (req, res) => {
    try {
      const chunks: Buffer[] = [];
      for await (const c of req) chunks.push(c as Buffer);
      const raw = Buffer.concat(chunks).toString("utf8");
      // Stateless: a server and transport per request (the SDK's stateless mode), so a host
      // that died mid-session leaves nothing behind here.
      const transport = new StreamableHTTPServerTransport({ sessionIdGenerator: undefined });
      const server = build();
      res.on("close", () => {
        transport.close().catch(() => {});
        server.close().catch(() => {});
      });
      await server.connect(transport);
      await transport.handleRequest(req, res, raw ? JSON.parse(raw) : undefined);
    } catch (err) {
      if (!res.headersSent) res.writeHead(500).end(String(err));
    }
  });
  await new Promise<void>((r) => http.listen(0, "127.0.0.1", r));
  const { port } = http.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}/mcp`,
    calls,
    inFlight: () => calls.filter((c) => c.endedAt === undefined),
    async close() {
      http.closeAllConnections();
      await new Promise<void>((r) => http.close(() => r()));
    },
  };
}
