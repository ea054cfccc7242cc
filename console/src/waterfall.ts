/**
 * A run as a waterfall, folded from its events (pure, like run.ts, so the inspector, its replay
 * slider and the unit tests share it): one lane per execution, in the order they appear, each
 * opened with why it exists (the first start, a recovery after its host was lost, a resume after a
 * wait), and bars on a common time axis measured from the job's `created_at`:
 *   queue wait (created → first `run.started`), preparation (`run.started` → `run.prepared`), each
 *   model turn (`model.turn` → its first tool call, the next turn or the lane's last event) with its
 *   quota waits inside it and its retries, a recovery's discarded turn and a fallback to the
 *   agent's next model (the refused call's bar and the next model's, `model.turn` reason
 *   `fallback`) as marks, each tool call
 *   (`tool.call` → `tool.result` of the same id) labelled sandbox, MCP, code, delegate or question,
 *   each wait for a person (`tool.approval_requested` / `input.requested` / `budget.exhausted` →
 *   the `run.resumed` of its call) and each child job (`child.created` → `child.finished`).
 * Every bar keeps the offset of the event that opened it, so selecting it shows that event.
 *
 * Timestamps are the hosts' `ts` (ISO, ms), so bars of one lane are as exact as its host's clock;
 * across lanes of different hosts they are as close as those clocks are.
 */
import type { EventEnvelope } from "../../src/contracts/events";
import { stateOfTerminalEvent } from "../../src/contracts/job-state";
import type { JobView } from "./api";
import { type OffsetEvent, recoveryReason, type ToolKind, toolKind } from "./run";

export type BarKind = "queue" | "preparation" | "model" | "quota" | "tool" | "wait" | "child";

export interface Bar {
  kind: BarKind;
  label: string;
  /** ms after the axis' origin. */
  start: number;
  end: number;
  /** The event that opened the bar (its payload is what a selection shows); null for the queue wait. */
  offset: number | null;
  /** Still open when the events end (a live run, or a lane its host never closed). */
  open: boolean;
  /** Words after the label: "2 retries", "discarded: asked again after a recovery", "error". */
  marks: string[];
  tool?: ToolKind;
  /** A child job's inspector. */
  href?: string;
}

export interface Lane {
  execution_id: string;
  epoch: number;
  /** Why this execution exists, in words. */
  reason: string;
  bars: Bar[];
}

export interface Waterfall {
  /** Epoch ms of the axis' 0 (the job's created_at, else the first event). */
  origin: number;
  /** ms from the origin to the axis' end (the job's finish, else the last event). */
  span: number;
  /** The job's total latency (created → finished, the API's) once it ended, else the span so far. */
  totalMs: number;
  lanes: Lane[];
  /** Time spent waiting for a person (approval or answer), summed; not the run's active time. */
  waitingMs: number;
  /** The total less the waits for a person. */
  activeMs: number;
}

const at = (e: EventEnvelope) => Date.parse(e.ts);

export function waterfall(events: readonly OffsetEvent[], job: JobView | null): Waterfall {
  const first = events[0]?.event;
  const origin = job ? Date.parse(job.created_at) : first ? at(first) : 0;
  const t = (e: EventEnvelope) => Math.max(0, at(e) - origin);
  const lanes: Lane[] = [];
  let lane: Lane | null = null;
  let model: Bar | null = null;
  let quota: Bar | null = null;
  let prep: Bar | null = null;
  const tools = new Map<string, Bar>();
  const waits = new Map<string, Bar>();
  const children = new Map<string, Bar>();
  const retries = new Map<Bar, number>();
  let lastT = 0;
  /**
   * The first execution's queue wait and preparation end at the job's own facts (`started_at`,
   * `prepared_at`: the claim's and the preparation's commit times), so they equal the latencies
   * the API reports; the host's `run.started` is emitted some ms after the claim commits
   * (24 ms in a browser test's run), which would make the queue look longer than the API says.
   */
  const fact = (k: "started_at" | "prepared_at") => {
    const v = job?.[k];
    return v ? Date.parse(v) - origin : null;
  };
  const firstLane = () => lanes.length === 1;
  /** A projected recovery (its execution delivered no event of its own) names the next lane's reason. */
  let pendingReason: string | null = null;

  const close = (b: Bar | null, end: number) => {
    if (b?.open) {
      b.end = Math.max(b.start, end);
      b.open = false;
    }
  };
  const closeTurn = (end: number) => {
    close(quota, end);
    quota = null;
    close(model, end);
    model = null;
  };
  const add = (b: Omit<Bar, "open" | "marks"> & { marks?: string[] }): Bar => {
    const bar: Bar = { marks: [], open: true, ...b };
    lane?.bars.push(bar);
    return bar;
  };

  for (const { offset, event: e } of events) {
    const now = t(e);
    lastT = Math.max(lastT, now);
    if (e.execution_id === "projector") {
      if (e.type === "run.recovered") pendingReason = recoveryReason(e.payload.reason);
    } else if (!lane || lane.execution_id !== e.execution_id) {
      // A new execution: what the last one left open ended when it was lost or suspended.
      if (lane) endLane(lane);
      model = quota = prep = null;
      let reason = pendingReason ?? (lanes.length === 0 ? "started" : "continued");
      if (e.type === "run.recovered") reason = recoveryReason(e.payload.reason);
      if (e.type === "run.resumed") reason = `resumed: ${e.payload.decision} by ${e.payload.by}`;
      pendingReason = null;
      lane = { execution_id: e.execution_id, epoch: e.epoch, reason, bars: [] };
      lanes.push(lane);
      if (lanes.length === 1 && e.type === "run.started") {
        lane.bars.push({
          kind: "queue",
          label: "queue wait",
          start: 0,
          end: fact("started_at") ?? now,
          offset: null,
          open: false,
          marks: [],
        });
      }
    }
    if (quota && e.type !== "quota.waiting") {
      close(quota, now);
      quota = null;
    }
    switch (e.type) {
      case "run.started":
        prep = add({ kind: "preparation", label: "preparation", start: now, end: now, offset });
        if (firstLane()) prep.start = fact("started_at") ?? now;
        break;
      case "run.prepared":
        close(prep, firstLane() ? (fact("prepared_at") ?? now) : now);
        prep = null;
        break;
      case "run.recovered":
        if (e.payload.discarded_turn) {
          const previous = lanes
            .at(-2)
            ?.bars.filter((b) => b.kind === "model")
            .at(-1);
          previous?.marks.push("discarded: asked again after the recovery");
        }
        break;
      case "model.turn": {
        const refused = model;
        closeTurn(now);
        const p = e.payload as { turn: number; reason: string; from?: unknown; to?: unknown; error?: unknown };
        if (p.reason === "fallback") {
          // The refused call's bar says where the turn went; the new bar is that model's call.
          refused?.marks.push(`refused (${String(p.error)}): fell back to ${String(p.to)}`);
          model = add({
            kind: "model",
            label: `model turn ${p.turn} on ${String(p.to)}`,
            start: now,
            end: now,
            offset,
          });
          model.marks.push(`fallback from ${String(p.from)}`);
          break;
        }
        model = add({ kind: "model", label: `model turn ${p.turn}`, start: now, end: now, offset });
        break;
      }
      case "model.delta":
        // A log from before `model.turn` existed: its text is one turn.
        if (!model) model = add({ kind: "model", label: "model turn", start: now, end: now, offset });
        break;
      case "model.retry": {
        if (!model) model = add({ kind: "model", label: "model turn", start: now, end: now, offset });
        const count = (retries.get(model) ?? 0) + 1;
        retries.set(model, count);
        model.marks = model.marks.filter((m) => !/^\d+ retr/.test(m));
        model.marks.push(`${count} ${count === 1 ? "retry" : "retries"} (last: ${e.payload.reason})`);
        break;
      }
      case "quota.waiting":
        if (!quota)
          quota = add({ kind: "quota", label: `quota wait (${e.payload.reason})`, start: now, end: now, offset });
        break;
      case "tool.call": {
        closeTurn(now);
        const kind = toolKind(e.payload.name, e.payload.server);
        tools.set(
          e.payload.id,
          add({ kind: "tool", label: `${kind} tool ${e.payload.name}`, start: now, end: now, offset, tool: kind }),
        );
        break;
      }
      case "tool.result": {
        const b = tools.get(e.payload.id);
        close(b ?? null, now);
        if (b && !e.payload.ok) b.marks.push("error");
        break;
      }
      case "budget.exhausted":
        closeTurn(now);
        waits.set(
          e.payload.call_id,
          add({
            kind: "wait",
            label: `waiting for budget (spent $${e.payload.spent_usd} of $${e.payload.limit_usd})`,
            start: now,
            end: now,
            offset,
          }),
        );
        break;
      case "tool.approval_requested":
      case "input.requested": {
        closeTurn(now);
        const what =
          e.type === "input.requested" ? "waiting for an answer" : `waiting for approval of ${e.payload.tool}`;
        waits.set(e.payload.call_id, add({ kind: "wait", label: what, start: now, end: now, offset }));
        break;
      }
      case "run.resumed": {
        // The person's wait ends at the decision (`waited_ms` after the request: decided_at −
        // requested_at in Postgres); from there to this event the job waited for a host again
        // (3.2 s of a 4.9 s "wait" in a loaded browser-test run), which is queue, not a person.
        const b = waits.get(e.payload.call_id);
        if (!b) break;
        const decided = Math.min(now, b.start + e.payload.waited_ms);
        close(b, decided);
        b.marks.push(`${e.payload.decision} by ${e.payload.by}`);
        const queued = add({ kind: "queue", label: "queue wait after the decision", start: decided, end: now, offset });
        queued.open = false;
        break;
      }
      case "child.created":
        children.set(
          e.payload.job_id,
          add({
            kind: "child",
            label: `child job ${e.payload.job_id.slice(0, 8)} (${e.payload.agent})`,
            start: now,
            end: now,
            offset,
            href: `#/jobs/${e.payload.job_id}`,
          }),
        );
        break;
      case "child.finished": {
        const b = children.get(e.payload.job_id);
        close(b ?? null, now);
        b?.marks.push(e.payload.state);
        break;
      }
      case "run.suspended":
        closeTurn(now);
        break;
      default:
        if (e.type.startsWith("run.")) closeTurn(now);
        break;
    }
    // Open bars grow with every event, so a live run's bars reach its newest event.
    if (lane) for (const b of lane.bars) if (b.open && b.kind !== "wait" && b.kind !== "child") b.end = now;
  }
  // The job's finish ends the axis only once its terminal event is among the events (a replayed
  // prefix ends at its last event).
  const ended = events.some(({ event: e }) => stateOfTerminalEvent(e.type) !== null);
  const finished = ended && job?.finished_at ? Date.parse(job.finished_at) - origin : null;
  // The axis holds every event: a host's terminal event is stamped after the job row's
  // finished_at commits (69 ms later in a browser test's run), so the axis can pass the total.
  const span = Math.max(finished ?? 0, lastT, 1);
  const totalMs = finished ?? span;
  // Waits and child jobs span executions: they stay open until their own end, or the axis' end.
  for (const l of lanes) for (const b of l.bars) if (b.open && (b.kind === "wait" || b.kind === "child")) b.end = span;
  const waitingMs = lanes
    .flatMap((l) => l.bars)
    .filter((b) => b.kind === "wait")
    .reduce((s, b) => s + (b.end - b.start), 0);
  return { origin, span, totalMs, lanes, waitingMs, activeMs: Math.max(0, totalMs - waitingMs) };
}

/**
 * An execution's last event is where what it left open ended (its host was lost or it suspended):
 * open bars already reach it. A tool call with no result there never got one from that host.
 */
function endLane(lane: Lane): void {
  for (const b of lane.bars) {
    if (!b.open || b.kind === "wait" || b.kind === "child") continue;
    b.open = false;
    if (b.kind === "tool") b.marks.push("no result from this execution");
  }
}
