/**
 * A run's MCP tools: one official-SDK client per server of the agent (Streamable HTTP),
 * connected when the run prepares and closed when it ends. The servers' tools that the agent
 * allows are offered to the model as `<server>__<tool>` with the server's own schemas; a call
 * runs with the server's timeout and the run's abort signal, so a cancel (or a timeout) sends
 * MCP `notifications/cancelled` and stops waiting at once. Everything a server or the network
 * does wrong (an isError result, a protocol error, a timeout, no answer) is a tool error the
 * model reads, never a failed run.
 *
 * Every request carries the run's fencing identity as headers, and a tools/call also as `_meta`
 * with its idempotency key (src/domain/mcp.ts names them); every request, a redirect's included,
 * goes only to a URL the operator allows (fetch.ts).
 */
import { setTimeout as sleep } from "node:timers/promises";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import type { JsonSchemaValidatorResult, jsonSchemaValidator } from "@modelcontextprotocol/sdk/validation/types.js";
import type { McpServer } from "../../src/contracts/agent";
import { mcpToolEntryName } from "../../src/contracts/agent";
import { mcpToolName } from "../../src/contracts/tools";
import type { ExecutionIdentity } from "../../src/domain/identity";
import { isUrlAllowed, MCP_FENCING_HEADERS, MCP_FENCING_META, mcpIdempotencyKey } from "../../src/domain/mcp";
import { errorFields, type Logger } from "../log";
import type { ModelToolSpec } from "../model/types";
import {
  CANCEL_NOTICE_MS,
  MCP_TOO_LARGE_CODE,
  McpResponseTooLarge,
  McpUrlRefused,
  mcpTransportFetch,
  tooLargeMessage,
} from "./fetch";
import { type McpHostConfig, secretFor } from "./mcp-config";

/**
 * The most characters of one result the model (and the `tool.result` event) gets; the rest is
 * cut with `truncated: true`. The same order as a shell command's captured output.
 */
export const MCP_RESULT_MAX_CHARS = 64 * 1024;
/** A server's tool description as offered to the model, at most this long. */
const MAX_DESCRIPTION_CHARS = 1024;
/** tools/list pages read per server (a server with more tools than that is not reasonable). */
const MAX_LIST_PAGES = 10;

/**
 * The SDK's client compiles each listed tool's `outputSchema` (Ajv, by default) and validates
 * every `structuredContent` against it, synchronously on the event loop, and both schema and
 * content come from the server, which the tenant chose: a `pattern` like `(a+)+$` would stall
 * the host for minutes, and every run's heartbeats with it. Nothing here relies on the server keeping its own promise
 * (the model reads the text, the event carries the content as sent), so no check is run.
 */
const NO_OUTPUT_SCHEMA_CHECK: jsonSchemaValidator = {
  getValidator<T>() {
    return (input: unknown): JsonSchemaValidatorResult<T> => ({
      valid: true,
      data: input as T,
      errorMessage: undefined,
    });
  },
};

export type McpCallResult =
  | { ok: true; output: { content: unknown[]; structured_content?: unknown; truncated: boolean }; text: string }
  | { ok: false; error: { code: McpErrorCode; message: string } };

export type McpErrorCode =
  | "mcp_not_allowed"
  | "mcp_unknown_secret"
  | "mcp_unreachable"
  | "mcp_timeout"
  | "mcp_protocol_error"
  | "mcp_tool_error"
  | "mcp_cancelled"
  | "mcp_result_too_large"
  | "invalid_input";

interface Connection {
  server: McpServer;
  client: Client | null;
  /** The server's tools by name (from tools/list), when connected. */
  listed: Map<string, { description?: string; inputSchema: Record<string, unknown> }>;
  /** Why the server cannot be used (it was not connected or listed). */
  problem: { code: McpErrorCode; message: string } | null;
}

export class McpToolset {
  private constructor(
    private readonly connections: Connection[],
    private readonly byName: Map<string, { conn: Connection; tool: string }>,
    /** What the model is offered, in the agent's order. */
    readonly specs: ModelToolSpec[],
    private readonly id: ExecutionIdentity,
    private readonly tenantId: string,
    private readonly config: McpHostConfig,
    private readonly log: Logger,
  ) {}

  /**
   * Connect to every server (concurrently, each within its timeout) and list its tools. A server
   * that cannot be used still has its allowed tools offered, with an open schema and the reason
   * in the description, so a model that calls one gets the reason as a tool error rather than
   * the tools silently missing.
   */
  static async open(
    servers: readonly McpServer[],
    config: McpHostConfig,
    id: ExecutionIdentity,
    tenantId: string,
    signal: AbortSignal,
    log: Logger,
  ): Promise<McpToolset> {
    const connections = await Promise.all(
      servers.map((server) => connectAndList(server, config, id, tenantId, signal, log)),
    );
    const byName = new Map<string, { conn: Connection; tool: string }>();
    const specs: ModelToolSpec[] = [];
    for (const conn of connections) {
      for (const entry of conn.server.tools) {
        const tool = mcpToolEntryName(entry);
        const name = mcpToolName(conn.server.name, tool);
        const listed = conn.listed.get(tool);
        if (conn.problem === null && listed === undefined) {
          // Connected, and the server has no such tool: offering it would only produce errors.
          log.warn("mcp tool not listed by its server", { server: conn.server.name, tool, job_id: id.jobId });
          continue;
        }
        byName.set(name, { conn, tool });
        specs.push(
          listed
            ? {
                name,
                description: (listed.description ?? `Tool ${tool} of MCP server ${conn.server.name}`).slice(
                  0,
                  MAX_DESCRIPTION_CHARS,
                ),
                parameters: listed.inputSchema,
              }
            : {
                name,
                description: `Tool ${tool} of MCP server ${conn.server.name} (currently unavailable: ${conn.problem?.message})`,
                parameters: { type: "object" },
              },
        );
      }
    }
    return new McpToolset(connections, byName, specs, id, tenantId, config, log);
  }

  /** The server a model-facing tool name belongs to, or null when it is not one of this run's MCP tools. */
  serverOf(name: string): string | null {
    return this.byName.get(name)?.conn.server.name ?? null;
  }

  /**
   * Call one offered tool. Never throws: every failure is a result the model reads. The values of
   * the server's secret headers are cut out of whatever it answers: a server that echoes its
   * request (an error page, a debug tool) must not hand the operator's credential to the tenant
   * through the model's context, the events or the job's output.
   */
  async call(name: string, args: unknown, toolCallId: string, signal: AbortSignal): Promise<McpCallResult> {
    const result = await this.callUnredacted(name, args, toolCallId, signal);
    const server = this.byName.get(name)?.conn.server;
    const secrets = Object.values(server?.headers ?? {})
      .map((h) => secretFor(this.config, h.secret, this.tenantId))
      .filter((v): v is string => v !== undefined && v !== "");
    return redact(result, secrets);
  }

  private async callUnredacted(
    name: string,
    args: unknown,
    toolCallId: string,
    signal: AbortSignal,
  ): Promise<McpCallResult> {
    const found = this.byName.get(name);
    if (!found) return { ok: false, error: { code: "invalid_input", message: `unknown tool "${name}"` } };
    const { conn, tool } = found;
    if (args !== undefined && (args === null || typeof args !== "object" || Array.isArray(args))) {
      return { ok: false, error: { code: "invalid_input", message: `the arguments of ${name} must be a JSON object` } };
    }
    // A server unreachable when the run started may be back: one new attempt per call.
    if (conn.client === null && isRetryable(conn.problem)) {
      const again = await connectAndList(conn.server, this.config, this.id, this.tenantId, signal, this.log);
      conn.client = again.client;
      conn.problem = again.problem;
    }
    if (conn.client === null) {
      return { ok: false, error: conn.problem ?? { code: "mcp_unreachable", message: "not connected" } };
    }
    const key = mcpIdempotencyKey(this.id.jobId, toolCallId);
    try {
      const result = await conn.client.callTool(
        {
          name: tool,
          arguments: (args ?? {}) as Record<string, unknown>,
          _meta: {
            [MCP_FENCING_META.jobId]: this.id.jobId,
            [MCP_FENCING_META.executionId]: this.id.executionId,
            [MCP_FENCING_META.epoch]: this.id.epoch,
            [MCP_FENCING_META.idempotencyKey]: key,
          },
        },
        undefined,
        { signal, timeout: conn.server.timeout_ms },
      );
      const content = Array.isArray(result.content) ? (result.content as unknown[]) : [];
      const text = contentText(content);
      if (result.isError === true) {
        return { ok: false, error: { code: "mcp_tool_error", message: text.slice(0, MCP_RESULT_MAX_CHARS) } };
      }
      const truncated = text.length > MCP_RESULT_MAX_CHARS;
      const serialized = JSON.stringify(content);
      return {
        ok: true,
        output: {
          // The event keeps the structured items when they fit; else the text the model got.
          content:
            serialized.length <= MCP_RESULT_MAX_CHARS
              ? content
              : [{ type: "text", text: text.slice(0, MCP_RESULT_MAX_CHARS) }],
          ...(result.structuredContent !== undefined &&
          JSON.stringify(result.structuredContent).length <= MCP_RESULT_MAX_CHARS
            ? { structured_content: result.structuredContent }
            : {}),
          truncated,
        },
        text: truncated ? `${text.slice(0, MCP_RESULT_MAX_CHARS)}\n[truncated]` : text,
      };
    } catch (err) {
      return { ok: false, error: describeFailure(conn.server, err, signal) };
    }
  }

  /**
   * End every session: DELETE it at the server (so it can free what it holds) and close the
   * client, which aborts whatever is still in flight. Never throws, and bounded: a server that
   * does not answer the DELETE does not hold up the run's end.
   */
  async close(): Promise<void> {
    await Promise.all(
      this.connections.map(async (conn) => {
        const client = conn.client;
        conn.client = null;
        if (!client) return;
        const transport = client.transport as StreamableHTTPClientTransport | undefined;
        try {
          await withTimeout(transport?.terminateSession() ?? Promise.resolve(), CANCEL_NOTICE_MS);
        } catch {
          // A server may refuse DELETE (405): the session then ends when it expires.
        }
        await client.close().catch(() => {});
      }),
    );
  }
}

/** A server we could not reach (or list) may be reachable later; a refused configuration is not. */
function isRetryable(problem: Connection["problem"]): boolean {
  return problem !== null && problem.code !== "mcp_not_allowed" && problem.code !== "mcp_unknown_secret";
}

async function connectAndList(
  server: McpServer,
  config: McpHostConfig,
  id: ExecutionIdentity,
  tenantId: string,
  signal: AbortSignal,
  log: Logger,
): Promise<Connection> {
  const conn: Connection = { server, client: null, listed: new Map(), problem: null };
  if (!isUrlAllowed(server.url, config.allowedUrls)) {
    conn.problem = {
      code: "mcp_not_allowed",
      message: `this host does not allow MCP calls to ${server.url} (the operator's MCP_ALLOWED_URLS)`,
    };
    return conn;
  }
  const headers: Record<string, string> = {};
  for (const [header, { secret }] of Object.entries(server.headers)) {
    // One answer for a secret not held and one outside the tenant's scope (as at the gateway).
    const value = secretFor(config, secret, tenantId);
    if (value === undefined) {
      conn.problem = {
        code: "mcp_unknown_secret",
        message: `header ${header} names the secret "${secret}", which this host does not hold for this tenant (MCP_SECRETS)`,
      };
      return conn;
    }
    headers[header] = value;
  }
  const secrets = Object.values(headers);
  headers[MCP_FENCING_HEADERS.jobId] = id.jobId;
  headers[MCP_FENCING_HEADERS.executionId] = id.executionId;
  headers[MCP_FENCING_HEADERS.epoch] = String(id.epoch);
  const transport = new StreamableHTTPClientTransport(new URL(server.url), {
    requestInit: { headers },
    fetch: mcpTransportFetch(server, config.allowedUrls),
  });
  const client = new Client(
    { name: "edge-agent-runtime", version: "0.1.0" },
    { jsonSchemaValidator: NO_OUTPUT_SCHEMA_CHECK },
  );
  // Transport errors after connect (a dropped GET stream) surface on the calls that need it.
  client.onerror = () => {};
  try {
    await client.connect(transport, { signal, timeout: server.timeout_ms });
    let cursor: string | undefined;
    for (let page = 0; page < MAX_LIST_PAGES; page++) {
      const listed = await client.listTools(cursor ? { cursor } : {}, { signal, timeout: server.timeout_ms });
      for (const t of listed.tools) {
        const { $schema: _drop, ...inputSchema } = t.inputSchema as Record<string, unknown>;
        conn.listed.set(t.name, { description: t.description, inputSchema });
      }
      cursor = listed.nextCursor;
      if (!cursor) break;
    }
    conn.client = client;
  } catch (err) {
    // An HTTP error's text is the server's answer, which may echo the request: no secret in
    // what the model is offered (the tool's description) or in the host's log.
    const failure = describeFailure(server, err, signal);
    conn.problem = { code: failure.code, message: redactText(failure.message, secrets) };
    const fields = errorFields(err);
    log.warn("mcp server not usable", {
      server: server.name,
      job_id: id.jobId,
      ...fields,
      error: redactText(String(fields.error), secrets),
    });
    await client.close().catch(() => {});
  }
  return conn;
}

function redactText(text: string, secrets: readonly string[]): string {
  let out = text;
  for (const secret of secrets) if (secret !== "") out = out.split(secret).join("[redacted]");
  return out;
}

/** Replace every secret in a value with `[redacted]` (a value that no longer parses becomes an error saying so). */
function redact(result: McpCallResult, secrets: readonly string[]): McpCallResult {
  let serialized = JSON.stringify(result);
  let found = false;
  for (const secret of secrets) {
    // As it appears inside a JSON string: quotes and backslashes escaped.
    const escaped = JSON.stringify(secret).slice(1, -1);
    if (serialized.includes(escaped)) {
      found = true;
      serialized = serialized.split(escaped).join("[redacted]");
    }
  }
  if (!found) return result;
  try {
    return JSON.parse(serialized) as McpCallResult;
  } catch {
    return {
      ok: false,
      error: { code: "mcp_protocol_error", message: "the server's answer contained a secret and was withheld" },
    };
  }
}

/** The model's view of a call's content: text items joined, any other item as its JSON. */
function contentText(content: unknown[]): string {
  return content
    .map((c) =>
      c !== null && typeof c === "object" && (c as { type?: unknown }).type === "text"
        ? String((c as { text?: unknown }).text ?? "")
        : JSON.stringify(c),
    )
    .join("\n");
}

function describeFailure(
  server: McpServer,
  err: unknown,
  signal: AbortSignal,
): { code: McpErrorCode; message: string } {
  const message = err instanceof Error ? err.message : String(err);
  if (signal.aborted) return { code: "mcp_cancelled", message: "the call was cancelled: the run is stopping" };
  if (err instanceof McpUrlRefused) return { code: "mcp_not_allowed", message };
  if (err instanceof McpResponseTooLarge || (err as { code?: unknown })?.code === MCP_TOO_LARGE_CODE) {
    return { code: "mcp_result_too_large", message: tooLargeMessage(server.name) };
  }
  // The SDK's McpError RequestTimeout (-32001).
  if ((err as { code?: unknown })?.code === -32001) {
    return {
      code: "mcp_timeout",
      message: `MCP server "${server.name}" did not answer within ${server.timeout_ms} ms; the call was cancelled`,
    };
  }
  const cause = (err as { cause?: { code?: unknown; message?: unknown } })?.cause;
  if (err instanceof TypeError || typeof cause?.code === "string" || /fetch failed|ECONN|ENOTFOUND/.test(message)) {
    const why = typeof cause?.message === "string" ? cause.message : message;
    return { code: "mcp_unreachable", message: `MCP server "${server.name}" is unreachable: ${why}` };
  }
  return { code: "mcp_protocol_error", message: `MCP server "${server.name}": ${message}`.slice(0, 2000) };
}

async function withTimeout<T>(p: Promise<T>, ms: number): Promise<T | undefined> {
  const timer = new AbortController();
  try {
    return await Promise.race([p, sleep(ms, undefined, { signal: timer.signal })]);
  } finally {
    timer.abort();
  }
}
