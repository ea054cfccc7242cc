/**
 * The built-in sandbox tools a job or an agent may allow. In a module of its own because both
 * job.ts (a job's `tools`) and agent.ts (an agent's `tools`, and the `agent` a job names) need
 * it: job.ts imports agent.ts, so agent.ts must not import job.ts back.
 */
export const TOOL_NAMES = ["shell", "read_file", "write_file", "list_dir"] as const;
export type ToolName = (typeof TOOL_NAMES)[number];
