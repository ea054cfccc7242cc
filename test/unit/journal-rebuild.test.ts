/**
 * Rebuilding a conversation from a job's journal (sandbox-host/runner/journal.ts): what a
 * recovering or resuming execution continues from, on synthetic journals; and the checkpoint a
 * waitpoint leaves beside it (sandbox-host/runner/waitpoint.ts).
 */
import { describe, expect, it } from "vitest";
import { rebuildFromJournal } from "../../sandbox-host/runner/journal";
import { readCheckpoint } from "../../sandbox-host/runner/waitpoint";
import type { JournalRecord } from "../../src/db/journal-repo";

const rows = (...steps: Array<Omit<JournalRecord, "seq" | "epoch"> & { epoch?: number }>): JournalRecord[] =>
  steps.map((s, i) => ({ seq: i + 1, epoch: s.epoch ?? 1, kind: s.kind, payload: s.payload }));
const call = (id: string, name = "files__charge") => ({ id, name, args: {} });

describe("rebuildFromJournal", () => {
  it("an empty journal: nothing to continue, the first turn comes next", () => {
    expect(rebuildFromJournal([])).toEqual({
      messages: [],
      turn: 0,
      text: "",
      open: [],
      repairedAt: null,
      lastSeq: 0,
      hadSandbox: false,
      snapshot: null,
    });
  });

  it("the last workspace snapshot is what a continuation restores, whichever execution took it", () => {
    const r = rebuildFromJournal(
      rows(
        { kind: "turn", payload: { turn: 1, text: "", calls: [call("a", "shell"), call("b", "shell")] } },
        { kind: "call", payload: { call_id: "a", name: "shell", sandbox: true } },
        { kind: "result", payload: { call_id: "a", content: "ok" } },
        { kind: "snapshot", payload: { sha256: "1".repeat(64), bytes: 120 } },
        { kind: "recovered", payload: { reason: "host_lost" }, epoch: 2 },
        { kind: "call", payload: { call_id: "b", name: "shell", sandbox: true }, epoch: 2 },
        { kind: "result", payload: { call_id: "b", content: "ok" }, epoch: 2 },
        { kind: "snapshot", payload: { sha256: "2".repeat(64), bytes: 130 }, epoch: 2 },
      ),
    );
    expect(r.snapshot).toEqual({ sha256: "2".repeat(64), bytes: 130 });
    // A snapshot is no message of the conversation.
    expect(r.messages.map((m) => m.role)).toEqual(["assistant", "tool", "tool"]);
    expect([r.hadSandbox, r.lastSeq, r.open]).toEqual([true, 8, []]);
  });

  it("keeps completed results, and names the calls with no result (started or not) in order", () => {
    const r = rebuildFromJournal(
      rows(
        { kind: "turn", payload: { turn: 1, text: "let me", calls: [call("a"), call("b", "shell"), call("c")] } },
        { kind: "call", payload: { call_id: "a", name: "files__charge", sandbox: false } },
        { kind: "result", payload: { call_id: "a", content: "done a" } },
        { kind: "call", payload: { call_id: "b", name: "shell", sandbox: true } },
      ),
    );
    expect(r.messages).toEqual([
      { role: "assistant", content: "let me", toolCalls: [call("a"), call("b", "shell"), call("c")] },
      { role: "tool", toolCallId: "a", content: "done a" },
    ]);
    expect(r.open).toEqual([
      { call: call("b", "shell"), started: true },
      { call: call("c"), started: false },
    ]);
    expect([r.turn, r.text, r.lastSeq, r.hadSandbox]).toEqual([1, "let me", 4, true]);
  });

  it("a turn answered and followed by input or the repair note continues after them; a recovery resets the sandbox news", () => {
    const r = rebuildFromJournal(
      rows(
        { kind: "turn", payload: { turn: 1, text: "", calls: [call("a", "shell")] } },
        { kind: "call", payload: { call_id: "a", name: "shell", sandbox: true } },
        { kind: "result", payload: { call_id: "a", content: "ok" } },
        { kind: "recovered", payload: { reason: "host_lost" }, epoch: 3 },
        { kind: "turn", payload: { turn: 2, text: "not json", calls: [] }, epoch: 3 },
        { kind: "user", payload: { content: "fix it", why: "repair", turn: 2 }, epoch: 3 },
        { kind: "user", payload: { content: "and hurry", why: "input", turn: 2 }, epoch: 3 },
      ),
    );
    expect(r.messages.slice(2)).toEqual([
      { role: "assistant", content: "not json" },
      { role: "user", content: "fix it" },
      { role: "user", content: "and hurry" },
    ]);
    expect([r.open, r.repairedAt, r.turn, r.hadSandbox, r.lastSeq]).toEqual([[], 2, 2, false, 7]);
  });
});

describe("the waitpoint checkpoint, a view of the journal", () => {
  it("a suspended turn: the journal ends at the call that waits, with the calls after it open", () => {
    // What a run writes before it suspends at b: the turn (riding on a's call row), a's result.
    const r = rebuildFromJournal(
      rows(
        { kind: "user", payload: { content: "also this", why: "input", turn: 0 } },
        { kind: "turn", payload: { turn: 1, text: "on it", calls: [call("a"), call("b", "shell"), call("c")] } },
        { kind: "call", payload: { call_id: "a", name: "files__charge", sandbox: false } },
        { kind: "result", payload: { call_id: "a", content: "ok" } },
      ),
    );
    expect(r.turn).toBe(1);
    expect(r.text).toBe("on it");
    expect(r.open.map((o) => [o.call.id, o.started])).toEqual([
      ["b", false],
      ["c", false],
    ]);
    expect(r.messages.map((m) => m.role)).toEqual(["user", "assistant", "tool"]);
  });

  it("reads version 2 as stored, and version 1 (which also held the conversation) by its call, turn and children only", () => {
    const children = { executionId: "e1", calls: { d1: { job_id: "j1", agent: "w" } } };
    expect(readCheckpoint({ v: 2, callId: "b", turn: 3 })).toEqual({ v: 2, callId: "b", turn: 3 });
    expect(readCheckpoint({ v: 2, callId: "d1", turn: 1, children })).toEqual({
      v: 2,
      callId: "d1",
      turn: 1,
      children,
    });
    const v1 = {
      v: 1,
      messages: [{ role: "user", content: "hi" }],
      text: "",
      turn: 2,
      maxTurns: 10,
      repaired: false,
      pending: call("b", "shell"),
      remaining: [call("c")],
    };
    expect(readCheckpoint(v1)).toEqual({ v: 2, callId: "b", turn: 2 });
    expect(readCheckpoint(null)).toBeNull();
    for (const broken of [{ v: 2, turn: 1 }, { v: 2, callId: "b" }, { v: 1 }, { v: 3, callId: "b", turn: 1 }]) {
      expect(() => readCheckpoint(broken)).toThrow(/not one this host can resume from/);
    }
  });
});
