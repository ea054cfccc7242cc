/**
 * The built-in sandbox tools a job or an agent may allow. In a module of its own because both
 * job.ts (a job's `tools`) and agent.ts (an agent's `tools`, and the `agent` a job names) need
 * it: job.ts imports agent.ts, so agent.ts must not import job.ts back.
 */
export const TOOL_NAMES = ["shell", "read_file", "write_file", "list_dir"] as const;
export type ToolName = (typeof TOOL_NAMES)[number];

/**
 * An MCP tool as the model sees it: `<server>__<tool>`. No sandbox tool name contains `__`, so
 * the two kinds never collide. At most MCP_TOOL_NAME_MAX characters: the function-name limit of
 * the providers we target (OpenAI's `^[a-zA-Z0-9_-]{1,64}$`).
 */
export const MCP_TOOL_SEPARATOR = "__";
export const MCP_TOOL_NAME_MAX = 64;
export const mcpToolName = (server: string, tool: string): string => `${server}${MCP_TOOL_SEPARATOR}${tool}`;
