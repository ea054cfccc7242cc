/**
 * The operator's side of an agent's MCP servers, shared by the gateway (refuse a definition it
 * can tell is unusable) and the hosts (never call what the operator did not allow):
 * - `MCP_ALLOWED_URLS`: the URL prefixes hosts may call. A tenant writes the URL, and a host
 *   sits inside the operator's network; without this list a definition could make hosts call any
 *   internal address. Empty or unset: MCP is off.
 * - the secret names a definition's headers may use (the hosts hold the values, MCP_SECRETS).
 * And the fencing identity each call carries, so a server can drop a duplicate or a stale
 * owner's call.
 */
import { type AgentDefinition, type McpServer, mcpToolEntryName } from "../contracts/agent";
import { mcpToolName } from "../contracts/tools";

/**
 * A URL prefix from MCP_ALLOWED_URLS, parsed: a URL is allowed when it has the prefix's origin
 * (scheme, host, port) and its path is the prefix's path or below it. Compared parsed, never as
 * strings: `https://mcp.example.com` as a string prefix would also admit
 * `https://mcp.example.com.attacker.net/`.
 */
export interface AllowedUrl {
  origin: string;
  /** Ends with `/`. */
  path: string;
}

/** Comma-separated http(s) URL prefixes → the list, or a message naming the bad entry. */
export function parseAllowedUrls(raw: string | undefined): AllowedUrl[] | string {
  const out: AllowedUrl[] = [];
  for (const entry of (raw ?? "").split(",")) {
    const e = entry.trim();
    if (e === "") continue;
    let url: URL;
    try {
      url = new URL(e);
    } catch {
      return `"${e}" is not a URL`;
    }
    if (url.protocol !== "https:" && url.protocol !== "http:") return `"${e}" is not an http(s) URL`;
    if (url.username || url.password || url.search || url.hash) {
      return `"${e}" must be scheme://host[:port][/path], without credentials, query or fragment`;
    }
    out.push({ origin: url.origin, path: url.pathname.endsWith("/") ? url.pathname : `${url.pathname}/` });
  }
  return out;
}

export function isUrlAllowed(raw: string, allowed: readonly AllowedUrl[]): boolean {
  let url: URL;
  try {
    url = new URL(raw);
  } catch {
    return false;
  }
  const path = url.pathname.endsWith("/") ? url.pathname : `${url.pathname}/`;
  return allowed.some((a) => a.origin === url.origin && path.startsWith(a.path));
}

/** Comma-separated secret names (the gateway's MCP_SECRET_NAMES: names only, never values). */
export function parseSecretNames(raw: string | undefined): string[] {
  return (raw ?? "")
    .split(",")
    .map((s) => s.trim())
    .filter((s) => s !== "");
}

/**
 * What the operator's settings say about a definition's MCP servers: null when usable, else the
 * reason (the gateway answers it as a 400). `secretNames` null: the gateway was not told the
 * names, so an unknown one is found by the host (a tool error the model sees).
 */
export function mcpServersProblem(
  servers: readonly McpServer[],
  allowedUrls: readonly AllowedUrl[],
  secretNames: readonly string[] | null,
): string | null {
  for (const [i, s] of servers.entries()) {
    if (allowedUrls.length === 0) {
      return `mcp_servers: MCP is not enabled on this deployment (the operator's MCP_ALLOWED_URLS is empty)`;
    }
    if (!isUrlAllowed(s.url, allowedUrls)) {
      return `mcp_servers.${i}.url: not a URL the operator allows MCP calls to (MCP_ALLOWED_URLS)`;
    }
    if (secretNames === null) continue;
    for (const [header, value] of Object.entries(s.headers)) {
      if (!secretNames.includes(value.secret)) {
        return `mcp_servers.${i}.headers.${header}: unknown secret "${value.secret}" (not one of the operator's MCP secrets)`;
      }
    }
  }
  return null;
}

/** A definition's MCP servers; a version stored before MCP existed has none. */
export function mcpServersOf(definition: Pick<AgentDefinition, "mcp_servers"> | null): readonly McpServer[] {
  return definition?.mcp_servers ?? [];
}

/** Which server and tool a model-facing name (`<server>__<tool>`) is, among the definition's allowed tools. */
export function findMcpTool(
  definition: Pick<AgentDefinition, "mcp_servers"> | null,
  toolName: string,
): { server: McpServer; tool: string; requiresApproval: boolean } | null {
  for (const server of mcpServersOf(definition)) {
    for (const entry of server.tools) {
      const tool = mcpToolEntryName(entry);
      if (mcpToolName(server.name, tool) === toolName) {
        return { server, tool, requiresApproval: typeof entry === "object" && entry.requires_approval };
      }
    }
  }
  return null;
}

/**
 * The approval check's MCP half: whether a call of `toolName` needs a person's approval. null:
 * `toolName` is not one of the definition's MCP tools (ask the sandbox tools' list).
 */
export function mcpRequiresApproval(
  definition: Pick<AgentDefinition, "mcp_servers"> | null,
  toolName: string,
): boolean | null {
  const found = findMcpTool(definition, toolName);
  return found === null ? null : found.requiresApproval;
}

/**
 * The fencing identity every MCP request of a run carries, as HTTP headers and (on tools/call)
 * as `_meta` keys: the job, the execution, the epoch its owner claimed it with, and an
 * idempotency key (job id + the model's tool call id) that stays the same if the call is ever
 * made again for the same job. A server that records the highest epoch per job can refuse a
 * stale owner's call, and one that records idempotency keys can drop a duplicate.
 */
export const MCP_FENCING_HEADERS = {
  jobId: "x-ear-job-id",
  executionId: "x-ear-execution-id",
  epoch: "x-ear-epoch",
  idempotencyKey: "x-ear-idempotency-key",
} as const;
export const MCP_FENCING_META = {
  jobId: "ear/job_id",
  executionId: "ear/execution_id",
  epoch: "ear/epoch",
  idempotencyKey: "ear/idempotency_key",
} as const;

export const mcpIdempotencyKey = (jobId: string, toolCallId: string): string => `${jobId}:${toolCallId}`;
