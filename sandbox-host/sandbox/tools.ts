/**
 * The agent's sandbox tools: their input schemas (declared in src/contracts/sandbox-tools.ts,
 * so the gateway's GET /v1/tools lists them too; turned into the JSON Schema the model sees),
 * and one dispatcher that runs a call against the run's sandbox. Every call goes through the
 * manager, so the first one creates the sandbox and a text-only run never does. A mistake of the
 * model (bad arguments, a path outside /workspace, a missing file) comes back as a tool error it
 * can read; an infrastructure failure (no sandbox) is thrown, and ends the run (`isRunFatal`).
 */
import { z } from "zod";
import {
  isSandboxTool,
  ListDirInput,
  ReadFileInput,
  SANDBOX_TOOLS,
  type SandboxToolName,
  ShellInput,
  sandboxToolSpecs,
  WriteFileInput,
} from "../../src/contracts/sandbox-tools";
import type { ModelToolSpec } from "../model/types";
import type { SandboxManager } from "./manager";
import { isRunFatal, SandboxError } from "./sandbox-errors";

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

export { isSandboxTool, ListDirInput, ReadFileInput, type SandboxToolName, ShellInput, WriteFileInput };

export const SANDBOX_TOOL_SPECS: ModelToolSpec[] = sandboxToolSpecs().map((t) => ({
  name: t.name,
  description: t.description,
  parameters: t.input_schema,
}));

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
  const parsed = SANDBOX_TOOLS[name].input.safeParse(args);
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
