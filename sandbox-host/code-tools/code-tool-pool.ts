/**
 * The host's code tools at run time: their catalog entries (what is offered and published) and
 * the calls, each on a tool thread of an offload pool of its own (`HOST_TOOLS_CONCURRENCY`
 * threads, so tool calls never queue behind, or starve, the answer checks of the shared pool).
 * Never on the host's event loop: a tool that blocks its thread for seconds delays no other
 * run's stream, heartbeat or lease renewal.
 *
 * Fail closed: a call past its `timeout_ms` has its thread terminated, and the slot is free only
 * when the thread has exited (the pool's rule); a cancel aborts the call's `ctx.signal` and the
 * thread is terminated if the call has not returned 1 s later; a thread past its memory limit
 * (`HOST_TOOLS_MEMORY_MB`) dies alone. Each is a tool error the model reads; the host stays ready.
 */
import type { Logger } from "../log";
import { OffloadError, OffloadTaskError } from "../offload/offload-errors";
import type { OffloadObserver } from "../offload/pool";
import { OffloadPool, workerEntry } from "../offload/pool";
import { CODE_TOOL_CANCEL_GRACE_MS, type CodeToolCall, type CodeToolOutcome, type ToolLogLine } from "./tool-call";
import type { CodeToolSpec } from "./tool-modules";

/** The tool thread's one task (tool-worker.ts); the type the pool checks calls against. */
type ToolTasks = { callTool(call: CodeToolCall): Promise<CodeToolOutcome> };

export interface CodeToolsOptions {
  /** The HOST_TOOLS module specifiers each thread loads. */
  modules: readonly string[];
  specs: readonly CodeToolSpec[];
  /** Calls running at once on this host (threads). */
  concurrency: number;
  /** Each thread's old-generation heap limit, MB. */
  memoryMb: number;
  log: Logger;
  observer?: OffloadObserver;
}

export class CodeTools {
  private readonly byName: ReadonlyMap<string, CodeToolSpec>;
  private readonly pool: OffloadPool<ToolTasks>;

  constructor(opts: CodeToolsOptions) {
    this.byName = new Map(opts.specs.map((s) => [s.name, s]));
    const { log } = opts;
    this.pool = new OffloadPool<ToolTasks>({
      entry: workerEntry(new URL("./tool-worker.ts", import.meta.url), "tool-worker.js"),
      name: "code-tool",
      size: opts.concurrency,
      // Every run makes one call at a time, so calls waiting ≤ runs (HOST_MAX_RUNS ≤ 256).
      maxQueue: 256,
      workerData: { modules: [...opts.modules] },
      resourceLimits: { maxOldGenerationSizeMb: opts.memoryMb, maxYoungGenerationSizeMb: Math.min(64, opts.memoryMb) },
      observer: opts.observer,
      onMessage: (m) => {
        const line = m as ToolLogLine;
        log[line.level](line.message, {
          ...line.fields,
          tool: line.tool,
          job_id: line.job_id,
          execution_id: line.execution_id,
        });
      },
    });
  }

  get specs(): CodeToolSpec[] {
    return [...this.byName.values()];
  }

  spec(name: string): CodeToolSpec | undefined {
    return this.byName.get(name);
  }

  /** One call; never throws: whatever the tool does is an outcome the model reads. */
  async call(call: CodeToolCall, signal: AbortSignal): Promise<CodeToolOutcome> {
    const spec = this.byName.get(call.name);
    if (!spec) return { ok: false, code: "tool_unavailable", message: `this host has no tool "${call.name}"` };
    try {
      return await this.pool.run("callTool", [call], {
        signal,
        timeoutMs: spec.timeout_ms,
        cancelGraceMs: CODE_TOOL_CANCEL_GRACE_MS,
      });
    } catch (err) {
      return failedCall(call.name, spec, err);
    }
  }

  stats() {
    return this.pool.stats();
  }

  close(opts: { timeoutMs?: number } = {}): Promise<void> {
    return this.pool.close(opts);
  }
}

function failedCall(name: string, spec: CodeToolSpec, err: unknown): CodeToolOutcome {
  if (!(err instanceof OffloadError)) {
    return { ok: false, code: "tool_error", message: err instanceof Error ? err.message : String(err) };
  }
  switch (err.code) {
    case "timeout":
      return {
        ok: false,
        code: "tool_timeout",
        message: `tool "${name}" ran past its ${spec.timeout_ms} ms; its thread was ended`,
      };
    case "aborted":
      return { ok: false, code: "tool_cancelled", message: "the call was cancelled" };
    case "queue_full":
    case "closed":
      return { ok: false, code: "tool_busy", message: `tool "${name}" was not run: ${err.message}` };
    case "worker_died":
      if (err instanceof OffloadTaskError && err.remoteName === "ERR_WORKER_OUT_OF_MEMORY") {
        return {
          ok: false,
          code: "tool_out_of_memory",
          message: `tool "${name}" ran out of memory; its thread was ended`,
        };
      }
      return { ok: false, code: "tool_crashed", message: `tool "${name}" ended its thread: ${err.message}` };
    default:
      return { ok: false, code: "tool_error", message: err.message };
  }
}
