/**
 * Rebuilding a conversation from a job's journal (sandbox-host/runner/journal.ts): what a
 * recovering execution continues from, on synthetic journals.
 */
import { describe, expect, it } from "vitest";
import { rebuildFromJournal } from "../../sandbox-host/runner/journal";
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
    });
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
