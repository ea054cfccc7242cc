/**
 * A run as the console shows it, folded from its events in offset order: the answer's text and
 * tool calls interleaved as they happened, the quota waits, the sandbox events and the terminal
 * outcome. Pure, so the chat, the inspector's replay (a prefix of the events) and the unit tests
 * share it.
 */
import type { EventEnvelope } from "../../src/contracts/events";

export interface OffsetEvent {
  offset: number;
  event: EventEnvelope;
}

export type Segment =
  | { kind: "text"; text: string }
  | { kind: "tool"; id: string; name: string; args: unknown; result: { ok: boolean; output: unknown } | null };

export interface RunFold {
  segments: Segment[];
  /** The model's text, all turns joined (what streamed, in order). */
  text: string;
  quotaWaits: Array<{ offset: number; ts: string; reason: string; key: string | null; ahead: number | null }>;
  sandbox: Array<{ offset: number; ts: string; type: string; detail: string }>;
  terminal: { type: string; offset: number; error: { code: string; message: string } | null } | null;
  executions: Array<{ execution_id: string; epoch: number }>;
  lastOffset: number;
}

export function foldRun(events: readonly OffsetEvent[]): RunFold {
  const f: RunFold = {
    segments: [],
    text: "",
    quotaWaits: [],
    sandbox: [],
    terminal: null,
    executions: [],
    lastOffset: 0,
  };
  const tools = new Map<string, Extract<Segment, { kind: "tool" }>>();
  for (const { offset, event: e } of events) {
    f.lastOffset = Math.max(f.lastOffset, offset);
    const last = f.executions.at(-1);
    if (e.execution_id !== "projector" && (!last || last.execution_id !== e.execution_id)) {
      f.executions.push({ execution_id: e.execution_id, epoch: e.epoch });
    }
    switch (e.type) {
      case "model.delta": {
        const tail = f.segments.at(-1);
        if (tail?.kind === "text") tail.text += e.payload.text;
        else f.segments.push({ kind: "text", text: e.payload.text });
        f.text += e.payload.text;
        break;
      }
      case "tool.call": {
        const seg = {
          kind: "tool" as const,
          id: e.payload.id,
          name: e.payload.name,
          args: e.payload.args,
          result: null,
        };
        tools.set(seg.id, seg);
        f.segments.push(seg);
        f.sandbox.push({ offset, ts: e.ts, type: e.type, detail: e.payload.name });
        break;
      }
      case "tool.result": {
        const seg = tools.get(e.payload.id);
        if (seg) seg.result = { ok: e.payload.ok, output: e.payload.output };
        f.sandbox.push({ offset, ts: e.ts, type: e.type, detail: e.payload.ok ? "ok" : "error" });
        break;
      }
      case "sandbox.created":
        f.sandbox.push({ offset, ts: e.ts, type: e.type, detail: "" });
        break;
      case "quota.waiting":
        f.quotaWaits.push({ offset, ts: e.ts, reason: e.payload.reason, key: e.payload.key, ahead: e.payload.ahead });
        break;
      case "run.failed":
      case "run.lost":
      case "run.timed_out":
        f.terminal = { type: e.type, offset, error: e.payload.error ?? null };
        break;
      case "run.completed":
      case "run.cancelled":
        f.terminal = { type: e.type, offset, error: null };
        break;
      default:
        break;
    }
  }
  return f;
}

/** A one-line summary of an event's payload for the timeline (long text cut). */
export function payloadSummary(e: EventEnvelope): string {
  const s = JSON.stringify(e.payload);
  return s.length > 160 ? `${s.slice(0, 157)}…` : s;
}
