/**
 * The agent's sandbox tools: input schemas (zod, turned into the JSON Schema the model sees),
 * and one dispatcher that runs a call against the run's sandbox. Every call goes through the
 * manager, so the first one creates the sandbox and a text-only run never does. A mistake of the
 * model (bad arguments, a path outside /workspace, a missing file) comes back as a tool error it
 * can read; an infrastructure failure (no sandbox) is thrown, and ends the run (`isRunFatal`).
 */
import { z } from "zod";
import type { ModelToolSpec } from "../model/types";
import type { SandboxManager } from "./manager";
import { isRunFatal, SandboxError } from "./sandbox-errors";

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

export type ShellOutput = {
  exit_code: number | null;
  stdout: string;
  stderr: string;
  truncated: boolean;
  timed_out: boolean;
  cancelled: boolean;
  /** The sandbox had to be restarted to end the command: /workspace is empty again. */
  sandbox_restarted: boolean;
};
export type ReadFileOutput = {
  path: string;
  size: number;
  encoding: "utf8" | "base64";
  content: string;
  truncated: boolean;
};
export type WriteFileOutput = { path: string; size: number };
export type ListDirOutput = {
  path: string;
  entries: Array<{ name: string; type: "file" | "dir" | "symlink" | "other"; size: number }>;
  truncated: boolean;
};

const TOOLS = {
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
} as const;

export type SandboxToolName = keyof typeof TOOLS;

export function isSandboxTool(name: string): name is SandboxToolName {
  return Object.hasOwn(TOOLS, name);
}

export const SANDBOX_TOOL_SPECS: ModelToolSpec[] = Object.entries(TOOLS).map(([name, t]) => {
  const { $schema: _drop, ...parameters } = z.toJSONSchema(t.input) as Record<string, unknown>;
  return { name, description: t.description, parameters };
});

export type ToolOutput = ShellOutput | ReadFileOutput | WriteFileOutput | ListDirOutput;
export type ToolResult = { ok: true; output: ToolOutput } | { ok: false; error: { code: string; message: string } };

/** The text a model gets back as the tool message. */
export function toolResultContent(r: ToolResult): string {
  return JSON.stringify(r.ok ? r.output : { error: r.error });
}

/**
 * Runs one tool call. Throws only for run-fatal errors (see `isRunFatal`); everything else is a
 * `{ ok: false }` result for the model.
 */
export async function callSandboxTool(
  manager: SandboxManager,
  runId: string,
  name: string,
  args: unknown,
  signal?: AbortSignal,
): Promise<ToolResult> {
  try {
    return { ok: true, output: await dispatch(manager, runId, name, args, signal) };
  } catch (err) {
    if (isRunFatal(err)) throw err;
    const e = err as SandboxError;
    return { ok: false, error: { code: e.code, message: e.message } };
  }
}

async function dispatch(
  manager: SandboxManager,
  runId: string,
  name: string,
  args: unknown,
  signal?: AbortSignal,
): Promise<ToolOutput> {
  if (!isSandboxTool(name)) throw new SandboxError("invalid_input", `unknown tool "${name}"`, { runId });
  const parsed = TOOLS[name].input.safeParse(args);
  if (!parsed.success) {
    throw new SandboxError("invalid_input", `invalid arguments for ${name}: ${z.prettifyError(parsed.error)}`, {
      runId,
    });
  }
  switch (name) {
    case "shell": {
      const a = parsed.data as z.infer<typeof ShellInput>;
      const r = await manager.exec(runId, { cmd: a.command, timeoutMs: (a.timeout_s ?? 60) * 1000, signal });
      return {
        exit_code: r.exitCode,
        stdout: r.stdout,
        stderr: r.stderr,
        truncated: r.truncated,
        timed_out: r.timedOut,
        cancelled: r.cancelled,
        sandbox_restarted: r.sandboxRestarted,
      };
    }
    case "read_file": {
      const a = parsed.data as z.infer<typeof ReadFileInput>;
      const r = await manager.readFile(runId, a.path, { maxBytes: a.max_bytes, signal });
      let encoding = a.encoding ?? "utf8";
      let content = "";
      if (encoding === "utf8") {
        try {
          content = new TextDecoder("utf-8", { fatal: true }).decode(r.data);
        } catch {
          encoding = "base64"; // not valid UTF-8: give the model the bytes rather than mojibake
        }
      }
      if (encoding === "base64") content = r.data.toString("base64");
      return { path: r.path, size: r.size, encoding, content, truncated: r.truncated };
    }
    case "write_file": {
      const a = parsed.data as z.infer<typeof WriteFileInput>;
      const data = a.encoding === "base64" ? Buffer.from(a.content, "base64") : Buffer.from(a.content, "utf8");
      const r = await manager.writeFile(runId, a.path, data, { signal });
      return { path: r.path, size: r.size };
    }
    case "list_dir": {
      const a = parsed.data as z.infer<typeof ListDirInput>;
      const r = await manager.listDir(runId, a.path ?? ".", { signal });
      return { path: r.path, entries: r.entries, truncated: r.truncated };
    }
  }
}
