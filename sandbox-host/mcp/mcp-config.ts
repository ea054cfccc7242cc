/**
 * The host's MCP settings, parsed once at startup (main.ts passes the env and the secrets file's
 * text): which URLs runs may call (MCP_ALLOWED_URLS; empty = MCP off) and the secrets agent
 * definitions may name in their headers (MCP_SECRETS, a JSON object of name → value, or the same
 * JSON in the file MCP_SECRETS_FILE), each for every tenant (a string) or for the tenants it
 * lists (`{"value": "…", "tenants": ["acme"]}`). Secrets live only in the host's memory: a
 * definition names them, events and logs never carry them, and a run of a tenant outside a
 * secret's scope never sends it.
 */
import {
  type AllowedUrl,
  parseAllowedUrls,
  parseSecretTenants,
  type SecretTenants,
  secretUsableBy,
} from "../../src/domain/mcp";

/** Every variable this module reads. */
export const MCP_ENV_NAMES: readonly string[] = ["MCP_ALLOWED_URLS", "MCP_SECRETS", "MCP_SECRETS_FILE"];

export interface McpSecret {
  value: string;
  /** Who may name it; null: every tenant. */
  tenants: SecretTenants;
}

export interface McpHostConfig {
  allowedUrls: readonly AllowedUrl[];
  secrets: ReadonlyMap<string, McpSecret>;
}

/** The value of secret `name` for a run of `tenantId`; undefined when not held, or not for this tenant. */
export function secretFor(config: McpHostConfig, name: string, tenantId: string): string | undefined {
  const secret = config.secrets.get(name);
  return secret !== undefined && secretUsableBy(secret.tenants, tenantId) ? secret.value : undefined;
}

export class McpConfigError extends Error {
  override readonly name = "McpConfigError";
}

export const MCP_DISABLED: McpHostConfig = { allowedUrls: [], secrets: new Map() };

export function mcpConfigFromEnv(env: Record<string, string | undefined>, secretsFileText?: string): McpHostConfig {
  const allowedUrls = parseAllowedUrls(env.MCP_ALLOWED_URLS);
  if (typeof allowedUrls === "string")
    throw new McpConfigError(`invalid MCP configuration: MCP_ALLOWED_URLS: ${allowedUrls}`);
  const inline = env.MCP_SECRETS?.trim();
  if (inline && secretsFileText !== undefined) {
    throw new McpConfigError("invalid MCP configuration: set MCP_SECRETS or MCP_SECRETS_FILE, not both");
  }
  const source = inline ? "MCP_SECRETS" : "MCP_SECRETS_FILE";
  const text = inline || secretsFileText?.trim();
  const secrets = new Map<string, McpSecret>();
  if (text) {
    let parsed: unknown;
    try {
      parsed = JSON.parse(text);
    } catch {
      // The text holds secrets: the parser's message (which quotes it) is not repeated.
      throw new McpConfigError(`invalid MCP configuration: ${source} is not JSON`);
    }
    if (parsed === null || typeof parsed !== "object" || Array.isArray(parsed)) {
      throw new McpConfigError(`invalid MCP configuration: ${source} must be a JSON object of secret name → value`);
    }
    for (const [name, entry] of Object.entries(parsed)) {
      const secret = secretEntry(entry, `${source}: secret "${name}"`);
      if (typeof secret === "string") throw new McpConfigError(`invalid MCP configuration: ${secret}`);
      secrets.set(name, secret);
    }
  }
  return { allowedUrls, secrets };
}

/** One MCP_SECRETS entry, or a message that never quotes its value. */
function secretEntry(entry: unknown, where: string): McpSecret | string {
  if (typeof entry === "string" && entry !== "") return { value: entry, tenants: null };
  const shape = `${where} must be a non-empty string or {"value": "…", "tenants": ["<tenant id>", …]}`;
  if (entry === null || typeof entry !== "object" || Array.isArray(entry)) return shape;
  const { value, tenants, ...rest } = entry as Record<string, unknown>;
  if (typeof value !== "string" || value === "" || Object.keys(rest).length > 0) return shape;
  const scope = parseSecretTenants(tenants, where);
  return typeof scope === "string" ? scope : { value, tenants: scope };
}
