/**
 * A code tool thread (code-tool-pool.ts starts it through the offload pool): loads the
 * HOST_TOOLS modules (workerData), then runs one call at a time: the arguments checked against
 * the tool's input, `run(args, ctx)`, the result as JSON. A `{cancel: id}` from the host aborts
 * the call's `ctx.signal` (the pool terminates the thread if the call has not returned 1 s later).
 * `ctx.log` lines go to the host's log as messages. The reply protocol is the offload pool's.
 */
import { parentPort, workerData } from "node:worker_threads";
import { z } from "zod";
import type { CodeTool, ToolContext } from "../../src/code-tools/define-tool";
import { isZodSchema } from "../../src/code-tools/define-tool";
import { answerValidator } from "../../src/domain/json-schema";
import type { TaskReply, TaskRequest } from "../offload/worker";
import { CODE_TOOL_RESULT_MAX_CHARS, type CodeToolCall, type CodeToolOutcome, type ToolLogLine } from "./tool-call";
import { loadToolModules } from "./tool-modules";

const { modules } = workerData as { modules: string[] };
const loaded = await loadToolModules(modules);
const running = new Map<number, AbortController>();
const checkers = new Map<string, (args: unknown) => { ok: true; value: unknown } | { ok: false; message: string }>();

function checkerOf(tool: CodeTool) {
  let check = checkers.get(tool.name);
  if (!check) {
    if (isZodSchema(tool.input)) {
      const schema = tool.input;
      check = (args) => {
        const parsed = schema.safeParse(args);
        return parsed.success
          ? { ok: true, value: parsed.data }
          : { ok: false, message: z.prettifyError(parsed.error) };
      };
    } else {
      const validate = answerValidator(tool.input as Record<string, unknown>);
      check = (args) => {
        const problem = validate(args);
        return problem === null ? { ok: true, value: args } : { ok: false, message: problem };
      };
    }
    checkers.set(tool.name, check);
  }
  return check;
}

async function call(id: number, req: CodeToolCall): Promise<CodeToolOutcome> {
  const entry = loaded.get(req.name);
  if (!entry) return { ok: false, code: "tool_unavailable", message: `this host has no tool "${req.name}"` };
  const checked = checkerOf(entry.tool)(req.args);
  if (!checked.ok)
    return { ok: false, code: "invalid_input", message: `invalid arguments for ${req.name}: ${checked.message}` };
  const abort = new AbortController();
  running.set(id, abort);
  const line = (level: ToolLogLine["level"]) => (message: string, fields?: Record<string, unknown>) => {
    const log: ToolLogLine = { level, message: String(message), fields: fields ?? {}, tool: req.name, ...req.identity };
    parentPort?.postMessage({ log });
  };
  const ctx: ToolContext = {
    ...req.identity,
    signal: abort.signal,
    log: { info: line("info"), warn: line("warn"), error: line("error") },
  };
  try {
    const value = await entry.tool.run(checked.value as never, ctx);
    if (abort.signal.aborted) return { ok: false, code: "tool_cancelled", message: "the call was cancelled" };
    // The model reads JSON; a value that has none (a BigInt, a cycle) is the tool's error.
    const json = JSON.stringify(value === undefined ? null : value);
    const truncated = json.length > CODE_TOOL_RESULT_MAX_CHARS;
    return { ok: true, json: truncated ? json.slice(0, CODE_TOOL_RESULT_MAX_CHARS) : json, truncated };
  } catch (err) {
    if (abort.signal.aborted) return { ok: false, code: "tool_cancelled", message: "the call was cancelled" };
    const e = err instanceof Error ? err : new Error(String(err));
    return { ok: false, code: "tool_error", message: `${e.name}: ${e.message}` };
  } finally {
    running.delete(id);
  }
}

parentPort?.on("message", async (msg: TaskRequest | { cancel: number }) => {
  if ("cancel" in msg) {
    running.get(msg.cancel)?.abort(new Error("cancelled"));
    return;
  }
  let reply: TaskReply;
  try {
    if (msg.task !== "callTool") throw new Error(`unknown task "${msg.task}"`);
    reply = { id: msg.id, ok: true, value: await call(msg.id, msg.args[0] as CodeToolCall) };
  } catch (err) {
    const e = err instanceof Error ? err : new Error(String(err));
    reply = { id: msg.id, ok: false, name: e.name, message: e.message };
  }
  parentPort?.postMessage(reply);
});
// Loaded: from now on an exit is a call's doing, not a broken start.
parentPort?.postMessage({ ready: true } satisfies TaskReply);
