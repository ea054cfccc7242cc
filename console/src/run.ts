/**
 * A run as the console shows it, folded from its events in offset order: its model turns (each
 * from its `model.turn` on: its text and tool calls interleaved as they happened; the last turn's
 * text is the answer, as the job's output is), the quota waits, the sandbox events and the
 * terminal outcome. Pure, so the chat, the inspector's replay (a prefix of the events) and the unit tests
 * share it.
 */
import type { EventEnvelope, EventPayload } from "../../src/contracts/events";
import { ASK_USER_TOOL, DELEGATE_TOOL_PREFIX, TOOL_NAMES } from "../../src/contracts/tools";

/** What runs a tool call, as the console labels it. */
export type ToolKind = "sandbox" | "MCP" | "code" | "delegate" | "question";

/**
 * From the `tool.call` event alone: an MCP call carries its `server`; the sandbox tools, `ask_user`
 * and the delegate prefix are reserved names (src/contracts/tools.ts), so any other name is one of
 * the hosts' code tools.
 */
export function toolKind(name: string, server?: string): ToolKind {
  if (server) return "MCP";
  if ((TOOL_NAMES as readonly string[]).includes(name)) return "sandbox";
  if (name === ASK_USER_TOOL) return "question";
  if (name.startsWith(DELEGATE_TOOL_PREFIX)) return "delegate";
  return "code";
}

/** Why a recovered execution exists (`run.recovered`'s reason), in words. */
export function recoveryReason(reason: string): string {
  if (reason === "host_lost") return "continued on another host after its host was lost";
  if (reason === "host_shutdown") return "continued on another host after its host shut down";
  return `continued after ${reason.replaceAll("_", " ")}`;
}

const plural = (n: number, one: string, many: string) => `${n} ${n === 1 ? one : many}`;

/**
 * The run's recoveries and model-call retries as sentences, one per recovery and one for all the
 * retries: "continued on another host after its host was lost; 1 turn asked again".
 */
export function recoverySummaries(events: readonly OffsetEvent[]): string[] {
  const out: string[] = [];
  const retries: Array<EventPayload<"model.retry">> = [];
  for (const { event: e } of events) {
    if (e.type === "model.retry") retries.push(e.payload);
    if (e.type !== "run.recovered") continue;
    const p = e.payload;
    const parts = [recoveryReason(p.reason)];
    if (p.discarded_turn) parts.push("1 turn asked again");
    if (p.unknown_calls?.length)
      parts.push(
        `${plural(p.unknown_calls.length, "tool call", "tool calls")} in flight made again or reported as outcome unknown`,
      );
    if (p.sandbox_reset) parts.push("its sandbox workspace was lost");
    if (e.execution_id === "projector") parts.push("the new execution has reported nothing yet");
    out.push(`Epoch ${e.epoch}: ${parts.join("; ")}`);
  }
  if (retries.length) {
    const reasons = new Map<string, number>();
    for (const r of retries) {
      const k = r.status === null ? r.reason : `${r.reason} (HTTP ${r.status})`;
      reasons.set(k, (reasons.get(k) ?? 0) + 1);
    }
    const waited = retries.reduce((s, r) => s + r.delay_ms, 0);
    out.push(
      `${plural(retries.length, "model call was", "model calls were")} asked again: ${[...reasons]
        .map(([k, n]) => `${k} ×${n}`)
        .join(", ")}; ${waited} ms spent backing off`,
    );
  }
  return out;
}

export interface OffsetEvent {
  offset: number;
  event: EventEnvelope;
}

export type Segment =
  | { kind: "text"; text: string }
  | {
      kind: "tool";
      id: string;
      name: string;
      /** What runs it (toolKind). */
      runs: ToolKind;
      args: unknown;
      result: { ok: boolean; output: unknown } | null;
    };

/**
 * One model turn: its number and why it started (`model.turn`), both null for events before any
 * such mark (a log written before hosts sent it: then the whole run is one turn).
 */
export interface ModelTurn {
  turn: number | null;
  reason: string | null;
  segments: Segment[];
}

export interface RunFold {
  /** The model turns in order; the last is the one whose text is the answer. */
  turns: ModelTurn[];
  /** Every turn's segments in order (text never joined across a turn's boundary). */
  segments: Segment[];
  /** The answer: the last turn's text. */
  text: string;
  quotaWaits: Array<{ offset: number; ts: string; reason: string; key: string | null; ahead: number | null }>;
  sandbox: Array<{ offset: number; ts: string; type: string; detail: string }>;
  terminal: { type: string; offset: number; error: { code: string; message: string } | null } | null;
  executions: Array<{ execution_id: string; epoch: number }>;
  /** Every waitpoint the run reached, in order; `resolved` is null while it still waits. */
  waits: Wait[];
  /** The child jobs the run's delegate calls created, in order, with how each ended once known. */
  children: Child[];
  lastOffset: number;
}

/** A child job a delegate call created (child.created), and its end (child.finished) once the parent resumed. */
export interface Child {
  offset: number;
  job_id: string;
  call_id: string;
  agent: string;
  finished: { state: string; error: { code: string; message: string } | null } | null;
}

/** A tool call that waited for a person: an approval gate, or an `ask_user` question. */
export interface Wait {
  offset: number;
  kind: "approval" | "input";
  call_id: string;
  tool: string;
  arguments: unknown;
  question: string | null;
  deadline_at: string;
  resolved: Pick<EventPayload<"run.resumed">, "decision" | "by" | "waited_ms"> | null;
  /** The execution that reached the waitpoint and ended `suspended`, and the one that resumed from it. */
  suspendedIn: { execution_id: string; epoch: number };
  resumedIn: { execution_id: string; epoch: number } | null;
}

/** The wait still open at the end of the fold (the card to decide on), if any. */
export const pendingWait = (f: RunFold): Wait | null => {
  const w = f.waits.at(-1);
  return w && !w.resolved && !f.terminal ? w : null;
};

export function foldRun(events: readonly OffsetEvent[]): RunFold {
  const f: RunFold = {
    turns: [],
    segments: [],
    text: "",
    quotaWaits: [],
    sandbox: [],
    terminal: null,
    executions: [],
    waits: [],
    children: [],
    lastOffset: 0,
  };
  const tools = new Map<string, Extract<Segment, { kind: "tool" }>>();
  const current = (): Segment[] => {
    const last = f.turns.at(-1);
    if (last) return last.segments;
    f.turns.push({ turn: null, reason: null, segments: [] });
    return (f.turns.at(-1) as ModelTurn).segments;
  };
  for (const { offset, event: e } of events) {
    f.lastOffset = Math.max(f.lastOffset, offset);
    const last = f.executions.at(-1);
    if (e.execution_id !== "projector" && (!last || last.execution_id !== e.execution_id)) {
      f.executions.push({ execution_id: e.execution_id, epoch: e.epoch });
    }
    switch (e.type) {
      case "model.turn": {
        // An unmarked turn with nothing in it (only lifecycle events so far) is this one.
        const open = f.turns.at(-1);
        if (open && open.turn === null && open.segments.length === 0) f.turns.pop();
        f.turns.push({ turn: e.payload.turn, reason: e.payload.reason, segments: [] });
        break;
      }
      case "model.delta": {
        const segments = current();
        const tail = segments.at(-1);
        if (tail?.kind === "text") tail.text += e.payload.text;
        else segments.push({ kind: "text", text: e.payload.text });
        break;
      }
      case "tool.call": {
        const seg = {
          kind: "tool" as const,
          id: e.payload.id,
          name: e.payload.name,
          runs: toolKind(e.payload.name, e.payload.server),
          args: e.payload.args,
          result: null,
        };
        tools.set(seg.id, seg);
        current().push(seg);
        f.sandbox.push({
          offset,
          ts: e.ts,
          type: e.type,
          detail: `${toolKind(e.payload.name, e.payload.server)} tool ${e.payload.name}`,
        });
        break;
      }
      case "tool.result": {
        const seg = tools.get(e.payload.id);
        if (seg) seg.result = { ok: e.payload.ok, output: e.payload.output };
        f.sandbox.push({ offset, ts: e.ts, type: e.type, detail: e.payload.ok ? "ok" : "error" });
        break;
      }
      case "tool.approval_requested":
        f.waits.push({
          offset,
          kind: "approval",
          call_id: e.payload.call_id,
          tool: e.payload.tool,
          arguments: e.payload.arguments,
          question: null,
          deadline_at: e.payload.deadline_at,
          resolved: null,
          suspendedIn: { execution_id: e.execution_id, epoch: e.epoch },
          resumedIn: null,
        });
        break;
      case "input.requested":
        f.waits.push({
          offset,
          kind: "input",
          call_id: e.payload.call_id,
          tool: "ask_user",
          arguments: { question: e.payload.question },
          question: e.payload.question,
          deadline_at: e.payload.deadline_at,
          resolved: null,
          suspendedIn: { execution_id: e.execution_id, epoch: e.epoch },
          resumedIn: null,
        });
        break;
      case "run.resumed": {
        const w = f.waits.find((x) => x.call_id === e.payload.call_id);
        if (w) {
          w.resolved = { decision: e.payload.decision, by: e.payload.by, waited_ms: e.payload.waited_ms };
          w.resumedIn = { execution_id: e.execution_id, epoch: e.epoch };
        }
        break;
      }
      case "child.created":
        f.children.push({
          offset,
          job_id: e.payload.job_id,
          call_id: e.payload.call_id,
          agent: e.payload.agent,
          finished: null,
        });
        break;
      case "child.finished": {
        const c = f.children.find((x) => x.job_id === e.payload.job_id);
        if (c) c.finished = { state: e.payload.state, error: e.payload.error ?? null };
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
      case "run.expired":
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
  f.segments = f.turns.flatMap((t) => t.segments);
  f.text = (f.turns.at(-1)?.segments ?? []).map((s) => (s.kind === "text" ? s.text : "")).join("");
  return f;
}

/** A one-line summary of an event's payload for the timeline (long text cut). */
export function payloadSummary(e: EventEnvelope): string {
  const s = JSON.stringify(e.payload);
  return s.length > 160 ? `${s.slice(0, 157)}…` : s;
}
