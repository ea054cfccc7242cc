/**
 * The console's fold of a run's events (console/src/run.ts): what the chat, the debug panel and
 * the inspector's replay show is computed here, so its order and pairing rules are pinned.
 */
import { describe, expect, it } from "vitest";
import { foldRun, type OffsetEvent, pendingWait } from "../../console/src/run";
import type { EventEnvelope } from "../../src/contracts/events";

const JOB = "00000000-0000-4000-8000-000000000001";
let seq = 0;
function ev(
  type: EventEnvelope["type"],
  payload: Record<string, unknown>,
  execution = "exec-a",
  epoch = 1,
): OffsetEvent {
  seq++;
  return {
    offset: seq,
    event: {
      job_id: JOB,
      execution_id: execution,
      epoch,
      seq,
      type,
      payload,
      ts: `2026-01-01T00:00:0${seq % 10}Z`,
    } as EventEnvelope,
  };
}

describe("foldRun", () => {
  it("joins text across deltas and keeps tool calls in place, each paired with its result", () => {
    seq = 0;
    const events = [
      ev("run.started", {}),
      ev("model.delta", { text: "Let me " }),
      ev("model.delta", { text: "look." }),
      ev("tool.call", { id: "c1", name: "shell", args: { command: "ls" } }),
      ev("sandbox.created", {}),
      ev("tool.result", { id: "c1", ok: true, output: { exit_code: 0, stdout: "a\n" } }),
      ev("model.delta", { text: "Done." }),
      ev("run.completed", { output: "Done." }),
    ];
    const f = foldRun(events);
    expect(f.text).toBe("Let me look.Done.");
    expect(f.segments).toEqual([
      { kind: "text", text: "Let me look." },
      {
        kind: "tool",
        id: "c1",
        name: "shell",
        runs: "sandbox",
        args: { command: "ls" },
        result: { ok: true, output: { exit_code: 0, stdout: "a\n" } },
      },
      { kind: "text", text: "Done." },
    ]);
    expect(f.sandbox.map((s) => s.type)).toEqual(["tool.call", "sandbox.created", "tool.result"]);
    expect(f.terminal).toEqual({ type: "run.completed", offset: 8, error: null });
    expect(f.lastOffset).toBe(8);
  });

  it("splits the run at each model.turn: the last turn's text is the answer, text never joined across turns", () => {
    seq = 0;
    const events = [
      ev("run.started", {}),
      ev("run.prepared", {}),
      ev("model.turn", { turn: 1, reason: "start" }),
      ev("tool.call", { id: "c1", name: "shell", args: { command: "ls" } }),
      ev("tool.result", { id: "c1", ok: true, output: {} }),
      ev("model.turn", { turn: 2, reason: "tool_results" }),
      ev("model.delta", { text: "I think it is positive" }),
      ev("model.turn", { turn: 3, reason: "repair" }),
      ev("model.delta", { text: '{"sentiment":' }),
      ev("model.delta", { text: ' "positive"}' }),
      ev("run.completed", { output: '{"sentiment": "positive"}' }),
    ];
    const f = foldRun(events);
    expect(f.turns.map((t) => [t.turn, t.reason, t.segments.map((s) => s.kind)])).toEqual([
      [1, "start", ["tool"]],
      [2, "tool_results", ["text"]],
      [3, "repair", ["text"]],
    ]);
    expect(f.text).toBe('{"sentiment": "positive"}');
    expect(f.segments.filter((s) => s.kind === "text").map((s) => s.text)).toEqual([
      "I think it is positive",
      '{"sentiment": "positive"}',
    ]);
    // Mid-run (the inspector's replay, a live chat) the turn streaming now is the answer so far.
    expect(foldRun(events.slice(0, 7)).text).toBe("I think it is positive");
    expect(foldRun(events.slice(0, 8)).text).toBe("");
  });

  it("a prefix of the events is the run as it stood then (the inspector's replay)", () => {
    seq = 0;
    const events = [
      ev("run.started", {}),
      ev("model.delta", { text: "a" }),
      ev("tool.call", { id: "c", name: "list_dir", args: {} }),
    ];
    const f = foldRun(events.slice(0, 3));
    expect(f.segments.at(-1)).toMatchObject({ kind: "tool", result: null });
    expect(f.terminal).toBeNull();
    expect(foldRun(events.slice(0, 2)).text).toBe("a");
    expect(foldRun([]).segments).toEqual([]);
  });

  it("collects quota waits, every execution seen, and a terminal error", () => {
    seq = 0;
    const events = [
      ev("run.started", {}),
      ev("quota.waiting", { reason: "limit_reached", key: "model:m", ahead: 3 }),
      ev("run.started", {}, "exec-b", 2),
      ev("run.failed", { error: { code: "quota_unavailable", message: "no slot" } }, "exec-b", 2),
    ];
    const f = foldRun(events);
    expect(f.quotaWaits).toEqual([
      { offset: 2, ts: events[1]!.event.ts, reason: "limit_reached", key: "model:m", ahead: 3 },
    ]);
    expect(f.executions).toEqual([
      { execution_id: "exec-a", epoch: 1 },
      { execution_id: "exec-b", epoch: 2 },
    ]);
    expect(f.terminal).toEqual({
      type: "run.failed",
      offset: 4,
      error: { code: "quota_unavailable", message: "no slot" },
    });
  });

  it("a projector's terminal event names no execution", () => {
    seq = 0;
    const f = foldRun([
      ev("run.lost", { source: "projector", error: { code: "lost", message: "host gone" } }, "projector", 0),
    ]);
    expect(f.executions).toEqual([]);
    expect(f.terminal?.error?.code).toBe("lost");
  });
  it("a waitpoint is pending from its request until the run.resumed of its call, with the executions on each side", () => {
    seq = 0;
    const deadline = "2026-01-02T00:00:00.000Z";
    const before = [
      ev("run.started", {}),
      ev("tool.approval_requested", {
        call_id: "c1",
        tool: "shell",
        arguments: { command: "ls" },
        deadline_at: deadline,
      }),
      ev("run.suspended", { waiting_for: { kind: "approval", call_id: "c1", tool: "shell" } }),
    ];
    const waiting = foldRun(before);
    expect(pendingWait(waiting)).toEqual({
      offset: 2,
      kind: "approval",
      call_id: "c1",
      tool: "shell",
      arguments: { command: "ls" },
      question: null,
      deadline_at: deadline,
      resolved: null,
      suspendedIn: { execution_id: "exec-a", epoch: 1 },
      resumedIn: null,
    });
    const after = [
      ...before,
      ev("run.resumed", { call_id: "c1", decision: "approve", by: "api", waited_ms: 1200 }, "exec-b", 2),
      ev("model.delta", { text: "ok" }, "exec-b", 2),
    ];
    const resumed = foldRun(after);
    expect(pendingWait(resumed)).toBeNull();
    expect(resumed.waits[0]).toMatchObject({
      resolved: { decision: "approve", by: "api", waited_ms: 1200 },
      resumedIn: { execution_id: "exec-b", epoch: 2 },
    });
    expect(resumed.executions).toEqual([
      { execution_id: "exec-a", epoch: 1 },
      { execution_id: "exec-b", epoch: 2 },
    ]);
    expect(resumed.text).toBe("ok");
  });

  it("an ask_user question is an input wait, and a run that ended while waiting (cancelled) has nothing pending", () => {
    seq = 0;
    const asked = [
      ev("input.requested", { call_id: "q1", question: "which colour?", deadline_at: "2026-01-02T00:00:00.000Z" }),
      ev("run.suspended", { waiting_for: { kind: "input", call_id: "q1", tool: "ask_user" } }),
    ];
    expect(pendingWait(foldRun(asked))).toMatchObject({ kind: "input", tool: "ask_user", question: "which colour?" });
    expect(pendingWait(foldRun([...asked, ev("run.cancelled", {}, "projector", 1)]))).toBeNull();
  });

  it("child jobs: each child.created adds one in order, its child.finished (matched by job id) gives its end; a prefix shows it unfinished", () => {
    seq = 0;
    const A = "00000000-0000-4000-8000-00000000000a";
    const B = "00000000-0000-4000-8000-00000000000b";
    const events = [
      ev("run.started", {}),
      ev("tool.call", { id: "d1", name: "delegate_worker", args: { input: "task-a" } }),
      ev("tool.call", { id: "d2", name: "delegate_worker", args: { input: "task-b" } }),
      ev("child.created", { job_id: A, call_id: "d1", agent: "worker@1" }),
      ev("child.created", { job_id: B, call_id: "d2", agent: "worker@1" }),
      ev("run.suspended", { waiting_for: { kind: "children", call_id: "d1", tool: "delegate_worker" } }),
      ev("run.resumed", { call_id: "d1", decision: "children", by: "children", waited_ms: 40 }, "exec-b", 2),
      // Finished in the other order than created: pairing is by job id, the list keeps creation order.
      ev(
        "child.finished",
        { job_id: B, call_id: "d2", state: "failed", error: { code: "model_error", message: "boom" } },
        "exec-b",
        2,
      ),
      ev("child.finished", { job_id: A, call_id: "d1", state: "completed", error: null }, "exec-b", 2),
      // A child.finished naming no child of this run changes nothing.
      ev("child.finished", { job_id: JOB, call_id: "dx", state: "completed", error: null }, "exec-b", 2),
      ev("run.completed", { output: "done" }, "exec-b", 2),
    ];
    const f = foldRun(events);
    expect(f.children).toEqual([
      { offset: 4, job_id: A, call_id: "d1", agent: "worker@1", finished: { state: "completed", error: null } },
      {
        offset: 5,
        job_id: B,
        call_id: "d2",
        agent: "worker@1",
        finished: { state: "failed", error: { code: "model_error", message: "boom" } },
      },
    ]);
    // A delegate wait is no person's to decide: nothing pending while the parent waits for its children.
    const waiting = foldRun(events.slice(0, 6));
    expect(pendingWait(waiting)).toBeNull();
    expect(waiting.children.map((c) => [c.job_id, c.finished])).toEqual([
      [A, null],
      [B, null],
    ]);
    // Replayed to between the two child.finished: only B has ended.
    expect(foldRun(events.slice(0, 8)).children.map((c) => c.finished?.state ?? null)).toEqual([null, "failed"]);
    expect(foldRun(events.slice(0, 3)).children).toEqual([]);
  });
});
