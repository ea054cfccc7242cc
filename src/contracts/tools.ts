/**
 * The built-in sandbox tools a job or an agent may allow. In a module of its own because both
 * job.ts (a job's `tools`) and agent.ts (an agent's `tools`, and the `agent` a job names) need
 * it: job.ts imports agent.ts, so agent.ts must not import job.ts back.
 */
export const TOOL_NAMES = ["shell", "read_file", "write_file", "list_dir"] as const;
export type ToolName = (typeof TOOL_NAMES)[number];

/** The tool the model calls to delegate to agent `name`. */
export const DELEGATE_TOOL_PREFIX = "delegate_";

/** The tool the model calls to ask the user a question (offered when the agent sets `ask_user`). */
export const ASK_USER_TOOL = "ask_user";

/**
 * A code tool's name (`defineTool`, docs/tools.md "Code tools"): lower-case, digits and single
 * `_`, so it is a provider function name and can never be an MCP tool's `<server>__<tool>`.
 * Reserved: the sandbox tools, `ask_user` and the delegate tools' prefix.
 */
export const CODE_TOOL_NAME_RE = /^[a-z][a-z0-9_]{0,63}$/;
export const CODE_TOOL_LIMITS = {
  maxDescriptionChars: 1024,
  /** The input JSON Schema as published in the catalog: a bound on what every turn sends. */
  maxInputSchemaBytes: 16 * 1024,
  /** A call's bound on its thread (the thread is terminated past it): default and limits, ms. */
  defaultTimeoutMs: 30_000,
  minTimeoutMs: 100,
  maxTimeoutMs: 600_000,
} as const;

/** Why `name` cannot be a code tool's, or null. */
export function codeToolNameProblem(name: string): string | null {
  if (!CODE_TOOL_NAME_RE.test(name)) return "must be 1-64 of a-z 0-9 _ and start with a letter";
  if (name.includes(MCP_TOOL_SEPARATOR)) return `must not contain "${MCP_TOOL_SEPARATOR}" (MCP tools' separator)`;
  if (name.startsWith(DELEGATE_TOOL_PREFIX))
    return `must not start with "${DELEGATE_TOOL_PREFIX}" (the delegate tools' prefix)`;
  if ((TOOL_NAMES as readonly string[]).includes(name) || name === ASK_USER_TOOL) return "is a built-in tool's name";
  return null;
}

/**
 * An MCP tool as the model sees it: `<server>__<tool>`. No sandbox tool name contains `__`, so
 * the two kinds never collide. At most MCP_TOOL_NAME_MAX characters: the function-name limit of
 * the providers we target (OpenAI's `^[a-zA-Z0-9_-]{1,64}$`).
 */
export const MCP_TOOL_SEPARATOR = "__";
export const MCP_TOOL_NAME_MAX = 64;
export const mcpToolName = (server: string, tool: string): string => `${server}${MCP_TOOL_SEPARATOR}${tool}`;
