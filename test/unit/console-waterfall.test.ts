/**
 * The run inspector's waterfall (console/src/waterfall.ts) and the debug panel's recovery and retry
 * sentences (console/src/run.ts): lanes per execution with their reasons, bars and their times, the
 * waits for a person split out of the active time, and tool calls labelled by what runs them.
 */
import { describe, expect, it } from "vitest";
import { type OffsetEvent, recoverySummaries, toolKind } from "../../console/src/run";
import { waterfall } from "../../console/src/waterfall";
import type { EventEnvelope } from "../../src/contracts/events";
import type { JobView } from "../../src/contracts/job";

const JOB = "00000000-0000-4000-8000-000000000002";
const T0 = Date.parse("2026-01-01T00:00:00.000Z");

/** An event at `ms` after T0, of execution `x` at `epoch`. */
function at(ms: number, type: EventEnvelope["type"], payload: Record<string, unknown>, x = "exec-a", epoch = 1) {
  return { ms, type, payload, x, epoch };
}
function log(items: ReturnType<typeof at>[]): OffsetEvent[] {
  return items.map((i, n) => ({
    offset: n + 1,
    event: {
      job_id: JOB,
      execution_id: i.x,
      epoch: i.epoch,
      seq: n + 1,
      type: i.type,
      payload: i.payload,
      ts: new Date(T0 + i.ms).toISOString(),
    } as EventEnvelope,
  }));
}
/** The few job-view fields the waterfall reads. */
const job = (finishedMs: number | null) =>
  ({
    created_at: new Date(T0).toISOString(),
    finished_at: finishedMs === null ? null : new Date(T0 + finishedMs).toISOString(),
  }) as JobView;

const bars = (w: ReturnType<typeof waterfall>, lane: number) =>
  w.lanes[lane]!.bars.map((b) => ({ kind: b.kind, label: b.label, start: b.start, end: b.end, marks: b.marks }));

describe("waterfall", () => {
  it("draws queue wait, preparation, model turns with quota waits and retries, and tools by kind", () => {
    const events = log([
      at(120, "run.started", {}),
      at(400, "run.prepared", {}),
      at(410, "model.turn", { turn: 1, reason: "start" }),
      at(420, "quota.waiting", { reason: "limit_reached", key: "model:m", ahead: 2 }),
      at(430, "quota.waiting", { reason: "limit_reached", key: "model:m", ahead: 1 }),
      at(900, "model.retry", { attempt: 1, delay_ms: 200, reason: "rate_limited", status: 429 }),
      at(1200, "model.retry", { attempt: 2, delay_ms: 400, reason: "rate_limited", status: 429 }),
      at(1700, "model.delta", { text: "x" }),
      at(1750, "tool.call", { id: "c1", name: "shell", args: {} }),
      at(1760, "tool.call", { id: "c2", name: "weather", args: {} }),
      at(1770, "tool.call", { id: "c3", name: "docs__search", args: {}, server: "docs" }),
      at(2000, "tool.result", { id: "c1", ok: true, output: {} }),
      at(2100, "tool.result", { id: "c2", ok: false, output: { code: "x", message: "y" } }),
      at(2200, "tool.result", { id: "c3", ok: true, output: {} }),
      at(2210, "model.turn", { turn: 2, reason: "tool_results" }),
      at(2500, "model.delta", { text: "done" }),
      at(2600, "run.completed", { output: "done" }),
    ]);
    const w = waterfall(events, job(2650));
    expect(w.span).toBe(2650);
    expect(w.lanes).toHaveLength(1);
    expect(w.lanes[0]!.reason).toBe("started");
    expect(bars(w, 0)).toEqual([
      { kind: "queue", label: "queue wait", start: 0, end: 120, marks: [] },
      { kind: "preparation", label: "preparation", start: 120, end: 400, marks: [] },
      { kind: "model", label: "model turn 1", start: 410, end: 1750, marks: ["2 retries (last: rate_limited)"] },
      // The quota wait lasts from its first notice to the next event that is not one.
      { kind: "quota", label: "quota wait (limit_reached)", start: 420, end: 900, marks: [] },
      { kind: "tool", label: "sandbox tool shell", start: 1750, end: 2000, marks: [] },
      { kind: "tool", label: "code tool weather", start: 1760, end: 2100, marks: ["error"] },
      { kind: "tool", label: "MCP tool docs__search", start: 1770, end: 2200, marks: [] },
      { kind: "model", label: "model turn 2", start: 2210, end: 2600, marks: [] },
    ]);
    expect(w.waitingMs).toBe(0);
    expect(w.activeMs).toBe(2650);
    // With the job's facts, the first execution's queue wait and preparation are the API's
    // (the claim and preparation commits), not the host's later event stamps.
    const withFacts = {
      ...job(2650),
      started_at: new Date(T0 + 100).toISOString(),
      prepared_at: new Date(T0 + 390).toISOString(),
    };
    expect(bars(waterfall(events, withFacts as JobView), 0).slice(0, 2)).toEqual([
      { kind: "queue", label: "queue wait", start: 0, end: 100, marks: [] },
      { kind: "preparation", label: "preparation", start: 100, end: 390, marks: [] },
    ]);
    // The terminal event stamped after the row's finish: the axis holds it, the total stays the API's.
    const late = waterfall(events, job(2500));
    expect([late.span, late.totalMs, late.activeMs]).toEqual([2600, 2500, 2500]);
    // A replayed prefix ends at its last event, not at the job's finish.
    const prefix = waterfall(events.slice(0, 4), job(2650));
    expect(prefix.span).toBe(420);
    expect(prefix.lanes[0]!.bars.find((b) => b.kind === "model")).toMatchObject({ open: true, end: 420 });
  });

  it("opens a lane per execution with its reason, marks the discarded turn and splits out the wait for a person", () => {
    const events = log([
      at(100, "run.started", {}, "x1", 1),
      at(200, "run.prepared", {}, "x1", 1),
      at(210, "model.turn", { turn: 1, reason: "start" }, "x1", 1),
      at(300, "model.delta", { text: "lost" }, "x1", 1),
      // x1's host dies; x2 continues from the journal and asks turn 1 again.
      at(
        5300,
        "run.recovered",
        { reason: "host_lost", from_step: 0, discarded_turn: true, unknown_calls: [], sandbox_reset: false },
        "x2",
        3,
      ),
      at(5310, "model.turn", { turn: 1, reason: "start" }, "x2", 3),
      at(
        5400,
        "tool.approval_requested",
        { call_id: "a1", tool: "shell", arguments: {}, deadline_at: "2026-01-02T00:00:00Z" },
        "x2",
        3,
      ),
      at(5410, "run.suspended", { waiting_for: { kind: "approval", call_id: "a1", tool: "shell" } }, "x2", 3),
      at(65_400, "run.resumed", { call_id: "a1", decision: "approve", by: "api", waited_ms: 59_000 }, "x3", 4),
      at(65_420, "tool.call", { id: "a1", name: "shell", args: {} }, "x3", 4),
      at(65_500, "tool.result", { id: "a1", ok: true, output: {} }, "x3", 4),
      at(65_510, "tool.call", { id: "d1", name: "delegate_worker", args: {} }, "x3", 4),
      at(
        65_520,
        "child.created",
        { job_id: "11111111-2222-4333-8444-555555555555", call_id: "d1", agent: "worker" },
        "x3",
        4,
      ),
      at(
        65_530,
        "run.suspended",
        { waiting_for: { kind: "children", call_id: "d1", tool: "delegate_worker" } },
        "x3",
        4,
      ),
      at(70_000, "run.resumed", { call_id: "d1", decision: "children", by: "children", waited_ms: 4470 }, "x4", 5),
      at(
        70_001,
        "child.finished",
        { job_id: "11111111-2222-4333-8444-555555555555", call_id: "d1", state: "completed", error: null },
        "x4",
        5,
      ),
      at(70_100, "run.completed", { output: "ok" }, "x4", 5),
    ]);
    const w = waterfall(events, job(70_100));
    expect(w.lanes.map((l) => [l.execution_id, l.epoch, l.reason])).toEqual([
      ["x1", 1, "started"],
      ["x2", 3, "continued on another host after its host was lost"],
      ["x3", 4, "resumed: approve by api"],
      ["x4", 5, "resumed: children by children"],
    ]);
    const lost = w.lanes[0]!.bars.find((b) => b.kind === "model")!;
    expect(lost).toMatchObject({ start: 210, end: 300, open: false });
    expect(lost.marks).toEqual(["discarded: asked again after the recovery"]);
    const wait = w.lanes[1]!.bars.find((b) => b.kind === "wait")!;
    // The person's wait ends at the decision (waited_ms); the second after it is queue again.
    expect(wait).toMatchObject({ label: "waiting for approval of shell", start: 5400, end: 64_400 });
    expect(wait.marks).toEqual(["approve by api"]);
    expect(w.lanes[2]!.bars[0]).toMatchObject({
      kind: "queue",
      label: "queue wait after the decision",
      start: 64_400,
      end: 65_400,
    });
    expect(w.waitingMs).toBe(59_000);
    expect(w.activeMs).toBe(11_100);
    const child = w.lanes[2]!.bars.find((b) => b.kind === "child")!;
    expect(child).toMatchObject({ start: 65_520, end: 70_001, href: "#/jobs/11111111-2222-4333-8444-555555555555" });
    expect(child.marks).toEqual(["completed"]);
    expect(w.lanes[2]!.bars.find((b) => b.label === "delegate tool delegate_worker")).toBeDefined();
  });

  it("labels tools by what runs them", () => {
    expect(toolKind("shell")).toBe("sandbox");
    expect(toolKind("weather")).toBe("code");
    expect(toolKind("docs__search", "docs")).toBe("MCP");
    expect(toolKind("ask_user")).toBe("question");
    expect(toolKind("delegate_worker")).toBe("delegate");
  });
});

describe("recoverySummaries", () => {
  it("marks a fallback turn on the refused call and the next model's bar, and a budget wait as a wait", () => {
    const events = log([
      at(100, "run.started", {}),
      at(200, "run.prepared", {}),
      at(210, "model.turn", { turn: 1, reason: "start" }),
      at(300, "model.turn", {
        turn: 1,
        reason: "fallback",
        from: "primary",
        to: "backup",
        error: "rate_limited",
        status: 429,
      }),
      at(900, "tool.call", { id: "c1", name: "shell", args: {} }),
      at(1000, "tool.result", { id: "c1", ok: true, output: {} }),
      at(1010, "model.turn", { turn: 2, reason: "tool_results" }),
      at(1020, "budget.exhausted", { call_id: "budget_2_ab", spent_usd: 0.035, limit_usd: 0.01, deadline_at: "x" }),
      at(1030, "run.suspended", { waiting_for: { kind: "budget", call_id: "budget_2_ab", tool: "primary" } }),
      at(5000, "run.resumed", { call_id: "budget_2_ab", decision: "approve", by: "api", waited_ms: 3000 }, "exec-b", 2),
      at(5100, "model.turn", { turn: 2, reason: "resumed" }, "exec-b", 2),
      at(5500, "run.completed", { output: "ok" }, "exec-b", 2),
    ]);
    const w = waterfall(events, job(5500));
    expect(bars(w, 0).filter((b) => b.kind === "model" || b.kind === "wait")).toEqual([
      {
        kind: "model",
        label: "model turn 1",
        start: 210,
        end: 300,
        marks: ["refused (rate_limited): fell back to backup"],
      },
      { kind: "model", label: "model turn 1 on backup", start: 300, end: 900, marks: ["fallback from primary"] },
      { kind: "model", label: "model turn 2", start: 1010, end: 1020, marks: [] },
      {
        kind: "wait",
        label: "waiting for budget (spent $0.035 of $0.01)",
        start: 1020,
        end: 4020,
        marks: ["approve by api"],
      },
    ]);
    expect(w.lanes[1]!.reason).toBe("resumed: approve by api");
  });

  it("says what a recovery and the retries did, in words", () => {
    const events = log([
      at(0, "model.retry", { attempt: 1, delay_ms: 250, reason: "rate_limited", status: 429 }),
      at(1, "model.retry", { attempt: 2, delay_ms: 500, reason: "rate_limited", status: 429 }),
      at(2, "model.retry", { attempt: 1, delay_ms: 100, reason: "network_error", status: null }),
      at(
        9,
        "run.recovered",
        { reason: "host_lost", from_step: 3, discarded_turn: true, unknown_calls: ["c1"], sandbox_reset: true },
        "x2",
        3,
      ),
    ]);
    expect(recoverySummaries(events)).toEqual([
      "Epoch 3: continued on another host after its host was lost; 1 turn asked again; 1 tool call in flight made again or reported as outcome unknown; its sandbox workspace was lost",
      "3 model calls were asked again: rate_limited (HTTP 429) ×2, network_error ×1; 850 ms spent backing off",
    ]);
    expect(recoverySummaries(log([at(0, "run.started", {})]))).toEqual([]);
  });
});
