/**
 * The operator's side of an agent's MCP servers, shared by the gateway (refuse a definition it
 * can tell is unusable) and the hosts (never call what the operator did not allow):
 * - `MCP_ALLOWED_URLS`: the URL prefixes hosts may call. A tenant writes the URL, and a host
 *   sits inside the operator's network; without this list a definition could make hosts call any
 *   internal address. Empty or unset: MCP is off.
 * - the secret names a definition's headers may use, and which tenants may use each (the hosts
 *   hold the values, MCP_SECRETS; the gateway may know the names, MCP_SECRET_NAMES).
 * And the fencing identity each call carries, so a server can drop a duplicate or a stale
 * owner's call.
 */
import { type AgentDefinition, type McpServer, mcpToolEntryName } from "../contracts/agent";
import { isHttpUrlWithoutCredentials } from "../contracts/http-url";
import { mcpToolName } from "../contracts/tools";
import { TENANT_ID_RE } from "./tenant-id";

/**
 * A URL prefix from MCP_ALLOWED_URLS or WEBHOOK_ALLOWED_URLS, parsed: a URL is allowed when it
 * has the prefix's origin (scheme, host, port) and its path is the prefix's path or below it.
 * Compared parsed, never as strings: `https://mcp.example.com` as a string prefix would also admit
 * `https://mcp.example.com.attacker.net/`.
 */
export interface AllowedUrl {
  /** `scheme://host[:port]`; with `anyPort`, `scheme://host` and every port of it is admitted. */
  origin: string;
  anyPort?: boolean;
  /** Ends with `/`: a path under it is allowed. */
  path: string;
  /** The path as the operator wrote it: allowed itself (`/tools` admits `/tools`; `/hooks/` does not admit `/hooks`). */
  exact: string;
}

/** Comma-separated http(s) URL prefixes → the list, or a message naming the bad entry. */
export function parseAllowedUrls(raw: string | undefined): AllowedUrl[] | string {
  const out: AllowedUrl[] = [];
  for (const entry of (raw ?? "").split(",")) {
    const e = entry.trim();
    if (e === "") continue;
    const wild = splitAnyPort(e);
    if (typeof wild === "string") return wild;
    let url: URL;
    try {
      url = new URL(wild?.url ?? e);
    } catch {
      return `"${e}" is not a URL`;
    }
    if (url.protocol !== "https:" && url.protocol !== "http:") return `"${e}" is not an http(s) URL`;
    if (url.username || url.password || url.search || url.hash) {
      return `"${e}" must be scheme://host[:port][/path], without credentials, query or fragment`;
    }
    const exact = normalisedPath(url.pathname);
    if (exact === null) return `"${e}" has a path that does not decode`;
    const path = exact.endsWith("/") ? exact : `${exact}/`;
    out.push(wild ? { origin: url.origin, anyPort: true, path, exact } : { origin: url.origin, path, exact });
  }
  return out;
}

/** The hosts `:*` may follow: this machine only. */
const LOOPBACK_HOSTS = new Set(["localhost", "127.0.0.1", "[::1]"]);

/**
 * `http://localhost:*` (any port of a loopback host): a local server's port changes from run to
 * run (Vite takes the next free one), and naming each one meant restarting the stack. Loopback
 * only: on any other host a wildcard would admit every service listening there. Returns the
 * entry without `:*`, null when it has none, or a message.
 */
export function splitAnyPort(entry: string): { url: string; host: string } | null | string {
  const m = /^(https?:\/\/)([^/?#@]+):\*(?=$|[/?#])/i.exec(entry);
  if (!m) return null;
  const host = (m[2] as string).toLowerCase();
  if (!LOOPBACK_HOSTS.has(host))
    return `"${entry}": a wildcard port (:*) is allowed only on localhost, 127.0.0.1 or [::1]`;
  return { url: `${m[1]}${host}${entry.slice(m[0].length)}`, host };
}

/** `url`'s origin is the entry's: the same, or (`anyPort`) the same scheme and host on any port. */
export function originMatches(url: URL, a: Pick<AllowedUrl, "origin" | "anyPort">): boolean {
  return a.anyPort ? `${url.protocol}//${url.hostname}` === a.origin : url.origin === a.origin;
}

/** Percent-decoding rounds before a path that still changes is refused (a server may decode twice). */
const MAX_DECODES = 3;

/**
 * The path a server may end up serving for `pathname`: percent-decoded until it no longer
 * changes (`%2f` is a `/` to many servers and proxies, `%252f` to one that decodes twice), `\`
 * read as `/`, and the dot segments resolved. Null when it does not decode, keeps changing, or
 * holds a control character. The URL parser alone resolves `..` and `%2e%2e` but leaves `%2f`
 * inside a segment, so `/hooks/..%2f..%2fadmin` stayed "under /hooks/" for a string compare while
 * a server that decodes it serves `/admin`.
 */
function normalisedPath(pathname: string): string | null {
  let p = pathname;
  for (let round = 0; ; round++) {
    let decoded: string;
    try {
      decoded = decodeURIComponent(p);
    } catch {
      return null;
    }
    if (decoded === p) break;
    if (round === MAX_DECODES) return null;
    p = decoded;
  }
  // biome-ignore lint/suspicious/noControlCharactersInRegex: control characters are what is refused
  if (/[\u0000-\u001f\u007f]/.test(p)) return null;
  const out: string[] = [];
  const segments = p.replaceAll("\\", "/").split("/").slice(1);
  for (const [i, seg] of segments.entries()) {
    const last = i === segments.length - 1;
    if (seg === "..") out.pop();
    if (seg === "." || seg === "..") {
      // `/a/b/..` is `/a/`: the last dot segment leaves a folder.
      if (last) out.push("");
      continue;
    }
    out.push(seg);
  }
  return `/${out.join("/")}`;
}

/**
 * Whether the operator's list admits `raw`: http(s), no credentials, the origin of an entry and
 * a path (decoded and normalised, `normalisedPath`) equal to or below the entry's. The gateway
 * checks it before storing a URL, the hosts again before each call (the list may have changed).
 */
export function isUrlAllowed(raw: string, allowed: readonly AllowedUrl[]): boolean {
  if (!isHttpUrlWithoutCredentials(raw)) return false;
  const url = new URL(raw);
  const path = normalisedPath(url.pathname);
  if (path === null) return false;
  return allowed.some((a) => originMatches(url, a) && (path === a.exact || path.startsWith(a.path)));
}

/**
 * The tenants that may name an operator secret in their definitions' headers; null: every tenant.
 * A secret reaches whatever server a definition points it at (within MCP_ALLOWED_URLS), and no
 * redaction can promise it is not read back from there (docs/tools.md), so the operator decides
 * who may use each one.
 */
export type SecretTenants = readonly string[] | null;

export const secretUsableBy = (tenants: SecretTenants, tenantId: string): boolean =>
  tenants === null || tenants.includes(tenantId);

/**
 * The tenant list of a secret's scope, or a message: non-empty, each a tenant id. `where` names
 * the secret in the message (the hosts' MCP_SECRETS and the gateway's MCP_SECRET_NAMES share it).
 */
export function parseSecretTenants(raw: unknown, where: string): string[] | string {
  if (!Array.isArray(raw) || raw.length === 0) return `${where}: tenants must be a non-empty list of tenant ids`;
  for (const t of raw) {
    if (typeof t !== "string" || !TENANT_ID_RE.test(t)) return `${where}: ${JSON.stringify(t)} is not a tenant id`;
  }
  return raw as string[];
}

/**
 * The gateway's MCP_SECRET_NAMES (names only, never values): comma-separated entries, each `name`
 * (every tenant may use it) or `name:acme|beta` (only those tenants) → name → tenants, or a
 * message naming the bad entry. A plain comma list is what it always was.
 */
export function parseSecretNames(raw: string | undefined): Map<string, SecretTenants> | string {
  const out = new Map<string, SecretTenants>();
  for (const entry of (raw ?? "").split(",")) {
    const e = entry.trim();
    if (e === "") continue;
    const colon = e.indexOf(":");
    const name = (colon < 0 ? e : e.slice(0, colon)).trim();
    if (name === "") return `"${e}": the secret's name is empty`;
    if (out.has(name)) return `"${name}" is listed twice`;
    if (colon < 0) {
      out.set(name, null);
      continue;
    }
    const tenants = parseSecretTenants(
      e
        .slice(colon + 1)
        .split("|")
        .map((t) => t.trim()),
      `"${name}"`,
    );
    if (typeof tenants === "string") return tenants;
    out.set(name, tenants);
  }
  return out;
}

/**
 * What the operator's settings say about a definition's MCP servers: null when usable, else the
 * reason (the gateway answers it as a 400). `secretNames` null: the gateway was not told the
 * names, so an unknown one (or one `tenantId` may not use) is found by the host (a tool error the
 * model sees). A secret outside the tenant's scope reads as unknown: a tenant learns no more
 * about the operator's secrets than the ones it may use.
 */
export function mcpServersProblem(
  servers: readonly McpServer[],
  allowedUrls: readonly AllowedUrl[],
  secretNames: ReadonlyMap<string, SecretTenants> | null,
  tenantId: string,
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
      const tenants = secretNames.get(value.secret);
      if (tenants === undefined || !secretUsableBy(tenants, tenantId)) {
        return `mcp_servers.${i}.headers.${header}: unknown secret "${value.secret}" (not one of the operator's MCP secrets this tenant may use)`;
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
): { server: McpServer; tool: string; requiresApproval: boolean; idempotent: boolean } | null {
  for (const server of mcpServersOf(definition)) {
    for (const entry of server.tools) {
      const tool = mcpToolEntryName(entry);
      if (mcpToolName(server.name, tool) === toolName) {
        return {
          server,
          tool,
          requiresApproval: typeof entry === "object" && entry.requires_approval,
          // A version stored before the flag existed lacks it: not idempotent.
          idempotent: typeof entry === "object" && entry.idempotent === true,
        };
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
