/**
 * One code tool call as it crosses between the host's thread and a tool thread (structured
 * clone: plain data), its outcomes and the bounds both sides apply. Loaded by both
 * (code-tool-pool.ts, tool-worker.ts), so it holds no code that starts threads.
 */
import type { ToolContext } from "../../src/code-tools/define-tool";

/** How long a cancelled call may take to return before its thread is terminated. */
export const CODE_TOOL_CANCEL_GRACE_MS = 1000;
/** What the model reads of a result at most (as for MCP results), then `[truncated]`. */
export const CODE_TOOL_RESULT_MAX_CHARS = 64 * 1024;

export type CodeToolIdentity = Omit<ToolContext, "signal" | "log">;

/** One call as it crosses to the tool thread (structured clone: plain data). */
export interface CodeToolCall {
  name: string;
  args: unknown;
  identity: CodeToolIdentity;
}

export type CodeToolErrorCode =
  | "invalid_input"
  | "tool_error"
  | "tool_timeout"
  | "tool_out_of_memory"
  | "tool_crashed"
  | "tool_cancelled"
  | "tool_busy"
  | "tool_unavailable";

/** `json` is cut on the tool thread at CODE_TOOL_RESULT_MAX_CHARS (`truncated`): no large parse on the loop. */
export type CodeToolOutcome =
  | { ok: true; json: string; truncated: boolean }
  | { ok: false; code: CodeToolErrorCode; message: string };

export interface ToolLogLine extends CodeToolIdentity {
  level: "info" | "warn" | "error";
  message: string;
  fields: Record<string, unknown>;
  tool: string;
}
