/**
 * The host's MCP settings, parsed once at startup (main.ts passes the env and the secrets file's
 * text): which URLs runs may call (MCP_ALLOWED_URLS; empty = MCP off) and the secrets agent
 * definitions may name in their headers (MCP_SECRETS, a JSON object of name → value, or the same
 * JSON in the file MCP_SECRETS_FILE). Secrets live only in the host's memory: a definition names
 * them, events and logs never carry them.
 */
import { type AllowedUrl, parseAllowedUrls } from "../../src/domain/mcp";

/** Every variable this module reads. */
export const MCP_ENV_NAMES: readonly string[] = ["MCP_ALLOWED_URLS", "MCP_SECRETS", "MCP_SECRETS_FILE"];

export interface McpHostConfig {
  allowedUrls: readonly AllowedUrl[];
  secrets: ReadonlyMap<string, string>;
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
  const secrets = new Map<string, string>();
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
    for (const [name, value] of Object.entries(parsed)) {
      if (typeof value !== "string" || value === "") {
        throw new McpConfigError(`invalid MCP configuration: ${source}: secret "${name}" must be a non-empty string`);
      }
      secrets.set(name, value);
    }
  }
  return { allowedUrls, secrets };
}
