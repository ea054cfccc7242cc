/**
 * One streamed model turn under its quota lease: text deltas coalesced into `model.delta`
 * events, tool calls collected, the lease checked before the call and at every chunk, released
 * when the turn ends however it ends.
 */
import type { ExecutionIdentity } from "../../src/domain/identity";
import type { QuotaLease } from "../../src/quota/lease-store";
import type { ModelMessage, ModelToolCall, ModelToolSpec } from "../model/types";
import { leaseRanOut, releaseQuota } from "./quota-gate";
import type { ActiveRun, Emit, RunContext } from "./run-context";

/** Deltas are flushed at this size even inside the coalescing window. */
export const MAX_DELTA_CHARS = 4096;

export interface TurnRequest {
  messages: ModelMessage[];
  model: string | undefined;
  tools: ModelToolSpec[] | undefined;
}

export interface TurnResult {
  text: string;
  calls: ModelToolCall[];
}

/**
 * Stream one turn. `onFirstOutput` is called at each text or tool-call chunk (the caller writes
 * the first_output_at fact once). Throws what the model client throws; the pending delta is
 * emitted and the lease released first.
 */
export async function streamModelTurn(
  ctx: RunContext,
  run: ActiveRun,
  id: ExecutionIdentity,
  req: TurnRequest,
  lease: QuotaLease | null,
  emit: Emit,
  onFirstOutput: () => void,
): Promise<TurnResult> {
  const deltas = new DeltaCoalescer(emit, ctx.coalesceMs);
  let text = "";
  const calls: ModelToolCall[] = [];
  try {
    try {
      // Checked before the call and at every chunk: a holder paused past its lease (SIGSTOP, a
      // stalled loop) wakes with its data and its timers due at once, and its renewal would
      // learn of the loss only a round trip later, after the run had carried on (docs/quota.md).
      const chunks = leaseRanOut(ctx, run, id, lease) ? [] : ctx.model.streamTurn({ ...req, signal: run.abort.signal });
      for await (const chunk of chunks) {
        if (run.abort.signal.aborted || leaseRanOut(ctx, run, id, lease)) break;
        if (chunk.type === "text") {
          if (!chunk.text) continue;
          onFirstOutput();
          text += chunk.text;
          deltas.push(chunk.text);
        } else if (chunk.type === "tool_call") {
          onFirstOutput();
          calls.push({ id: chunk.id, name: chunk.name, args: chunk.args });
        } else if (chunk.type === "done") {
          break;
        }
      }
    } finally {
      await releaseQuota(ctx, lease);
    }
  } finally {
    deltas.flush();
  }
  return { text, calls };
}

/** Text arriving within `windowMs` (or up to MAX_DELTA_CHARS) becomes one `model.delta` event. */
class DeltaCoalescer {
  private pending = "";
  private timer: NodeJS.Timeout | undefined;

  constructor(
    private readonly emit: Emit,
    private readonly windowMs: number,
  ) {}

  push(text: string): void {
    this.pending += text;
    if (this.pending.length >= MAX_DELTA_CHARS) this.flush();
    else this.timer ??= setTimeout(() => this.flush(), this.windowMs);
  }

  flush(): void {
    clearTimeout(this.timer);
    this.timer = undefined;
    if (this.pending) this.emit("model.delta", { text: this.pending });
    this.pending = "";
  }
}
