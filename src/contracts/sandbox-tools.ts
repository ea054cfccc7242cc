/**
 * The built-in sandbox tools' declarations: each one's input (zod) and the description the model
 * reads. The host runs them (sandbox-host/sandbox/tools.ts); the gateway lists them in GET
 * /v1/tools beside the hosts' code tools.
 */
import { z } from "zod";
import type { ToolName } from "./tools";

export const ShellInput = z.object({
  command: z.string().min(1).describe("Shell command line, run by /bin/sh -c in /workspace"),
  timeout_s: z
    .number()
    .int()
    .min(1)
    .max(600)
    .optional()
    .describe("Kill the command after this many seconds (default 60)"),
});
export const ReadFileInput = z.object({
  path: z.string().min(1).describe("File path, relative to /workspace or absolute inside it"),
  encoding: z.enum(["utf8", "base64"]).optional().describe("utf8 (default) for text; base64 for binary content"),
  max_bytes: z.number().int().min(1).max(1_048_576).optional().describe("Read at most this many bytes (default 1 MiB)"),
});
export const WriteFileInput = z.object({
  path: z.string().min(1).describe("File path, relative to /workspace or absolute inside it"),
  content: z.string().describe("The whole new content of the file"),
  encoding: z.enum(["utf8", "base64"]).optional().describe("How `content` is encoded (default utf8)"),
});
export const ListDirInput = z.object({
  path: z.string().min(1).optional().describe("Directory, relative to /workspace (default: /workspace itself)"),
});

/** Keyed by TOOL_NAMES (src/contracts/tools.ts): the `satisfies` fails the build if the two differ. */
export const SANDBOX_TOOLS = {
  shell: {
    input: ShellInput,
    description:
      "Run a shell command in the sandbox (busybox/POSIX sh, no network). Returns exit code, stdout and stderr; long output is truncated with a marker.",
  },
  read_file: { input: ReadFileInput, description: "Read a file from the sandbox workspace (/workspace)." },
  write_file: {
    input: WriteFileInput,
    description: "Create or overwrite a file in the sandbox workspace (/workspace); parent directories are created.",
  },
  list_dir: { input: ListDirInput, description: "List a directory of the sandbox workspace (/workspace)." },
} as const satisfies Record<ToolName, { input: z.ZodType; description: string }>;

export type SandboxToolName = keyof typeof SANDBOX_TOOLS;

export function isSandboxTool(name: string): name is SandboxToolName {
  return Object.hasOwn(SANDBOX_TOOLS, name);
}

/** Each sandbox tool with its input as the JSON Schema the model sees. */
export function sandboxToolSpecs(): Array<{
  name: SandboxToolName;
  description: string;
  input_schema: Record<string, unknown>;
}> {
  return (Object.entries(SANDBOX_TOOLS) as Array<[SandboxToolName, (typeof SANDBOX_TOOLS)[SandboxToolName]]>).map(
    ([name, t]) => {
      const { $schema: _drop, ...input_schema } = z.toJSONSchema(t.input) as Record<string, unknown>;
      return { name, description: t.description, input_schema };
    },
  );
}
