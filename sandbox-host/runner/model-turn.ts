/**
 * One streamed model call under its quota lease: text deltas coalesced into `model.delta`
 * events, tool calls collected, the lease checked before the call and at every chunk, released
 * when the call ends however it ends. Whether the call failed before or after producing output
 * is part of the result: only the first may be retried (model-call.ts). A lost lease stops the
 * call (no chunk is taken under it) and is a result of its own: the turn is asked again.
 */
import {
  ModelError,
  type ModelMessage,
  type ModelResponseFormat,
  type ModelToolCall,
  type ModelToolSpec,
  type ModelUsage,
} from "../model/types";
import { type AdmittedTurn, leaseRanOut, releaseQuota } from "./quota-gate";
import type { Emit, Execution } from "./run-context";

/** Deltas are flushed at this size even inside the coalescing window. */
export const MAX_DELTA_CHARS = 4096;

export interface TurnRequest {
  messages: ModelMessage[];
  /** The registry's public model name (the host's router maps it to a provider and upstream id). */
  model: string | undefined;
  tools: ModelToolSpec[] | undefined;
  maxOutputTokens?: number | null;
  temperature?: number | null;
  topP?: number | null;
  responseFormat?: ModelResponseFormat | null;
}

export type TurnResult =
  | {
      ok: true;
      text: string;
      calls: ModelToolCall[];
      /** What the provider's usage chunk said; undefined when it sent none. */
      usage: ModelUsage | undefined;
      /** The provider's finish_reason (`stop`, `tool_calls`, `length`, …); null when it sent none. */
      finishReason: string | null;
    }
  | {
      ok: false;
      error: ModelError;
      /** What streamed before the failure. */
      text: string;
      calls: ModelToolCall[];
      /** True once a text or tool-call chunk arrived: the call must not be repeated. */
      outputStarted: boolean;
    }
  | {
      ok: false;
      /** The lease was lost (renewal found it gone, or past its local deadline): the call was stopped. */
      leaseLost: true;
      /** What streamed before the loss (discarded: the turn is asked again). */
      text: string;
      calls: ModelToolCall[];
      outputStarted: boolean;
    };

/**
 * Stream one call. Each text or tool-call chunk observes the run's first_output_at fact (once:
 * no statement of its own, it rides on the next heartbeat or the terminal write). A provider
 * failure (ModelError) is returned, not thrown; any other error is thrown. The pending delta is
 * emitted and the lease released first.
 */
export async function streamModelTurn(
  exec: Execution,
  call: { request: TurnRequest; admitted: AdmittedTurn },
): Promise<TurnResult> {
  const { deps, run } = exec;
  const { request: req } = call;
  const { lease, lost } = call.admitted;
  // The call's own signal: the run's abort or this lease's loss. Listeners, not AbortSignal.any,
  // which leaks when combined with the run's long-lived signal (nodejs/node#55351).
  const stop = new AbortController();
  const onStop = () => stop.abort();
  exec.signal.addEventListener("abort", onStop, { once: true });
  lost.addEventListener("abort", onStop, { once: true });
  if (exec.signal.aborted || lost.aborted) stop.abort();
  let leaseLost = false;
  const ranOut = () => {
    leaseLost ||= lost.aborted || leaseRanOut(exec, lease);
    return leaseLost;
  };
  const onFirstOutput = () => run.observe("first_output_at");
  const deltas = new DeltaCoalescer(exec.emit, deps.coalesceMs);
  let text = "";
  const calls: ModelToolCall[] = [];
  let usage: ModelUsage | undefined;
  let finishReason: string | null = null;
  let outputStarted = false;
  try {
    try {
      // Checked before the call and at every chunk: a holder paused past its lease (SIGSTOP, a
      // stalled loop) wakes with its data and its timers due at once, and its renewal would
      // learn of the loss only a round trip later, after the run had carried on (docs/quota.md).
      const chunks = ranOut() ? [] : deps.model.streamTurn({ ...req, signal: stop.signal });
      for await (const chunk of chunks) {
        if (exec.signal.aborted || ranOut()) break;
        if (chunk.type === "text") {
          if (!chunk.text) continue;
          outputStarted = true;
          onFirstOutput();
          text += chunk.text;
          deltas.push(chunk.text);
        } else if (chunk.type === "tool_call") {
          outputStarted = true;
          onFirstOutput();
          calls.push({ id: chunk.id, name: chunk.name, args: chunk.args });
        } else if (chunk.type === "done") {
          usage = chunk.usage;
          finishReason = chunk.finishReason;
          break;
        }
      }
    } finally {
      exec.signal.removeEventListener("abort", onStop);
      lost.removeEventListener("abort", onStop);
      await releaseQuota(deps, lease);
    }
  } catch (err) {
    // A call stopped by its lost lease fails with the abort it was given: the loss is the result.
    if (!exec.signal.aborted && ranOut()) return { ok: false, leaseLost: true, text, calls, outputStarted };
    if (!(err instanceof ModelError)) throw err;
    return { ok: false, error: err, text, calls, outputStarted };
  } finally {
    deltas.flush();
  }
  if (!exec.signal.aborted && leaseLost) return { ok: false, leaseLost: true, text, calls, outputStarted };
  return { ok: true, text, calls, usage, finishReason };
}

/**
 * Text arriving within `windowMs` (or up to MAX_DELTA_CHARS) becomes one `model.delta` event.
 * The turn's first text goes out at once (the user's first token waits for nothing); after it,
 * a piece waits at most `windowMs` for the pieces behind it, never longer. Each event costs a
 * trip through the outbox, the gateway's ingest, the job's log and every watcher, so fewer
 * events is less of that work per run (docs/events.md, "Delta coalescing").
 */
export class DeltaCoalescer {
  private pending = "";
  private timer: NodeJS.Timeout | undefined;
  private emitted = false;

  constructor(
    private readonly emit: Emit,
    private readonly windowMs: number,
  ) {}

  push(text: string): void {
    this.pending += text;
    if (!this.emitted || this.pending.length >= MAX_DELTA_CHARS || this.windowMs <= 0) this.flush();
    else this.timer ??= setTimeout(() => this.flush(), this.windowMs);
  }

  flush(): void {
    clearTimeout(this.timer);
    this.timer = undefined;
    if (this.pending) {
      this.emitted = true;
      this.emit("model.delta", { text: this.pending });
    }
    this.pending = "";
  }
}
