import { describe, expect, it } from "vitest";
import type { ToolCallRecord } from "./recording-mcp";
import { checkRuns, type RunExecutionRow, type RunHistory, type RunStreamEvent } from "./runs-checker";

const J = "00000000-0000-4000-8000-000000000001";
const E1 = "e1";
const E2 = "e2";

const ev = (
  offset: number,
  type: string,
  executionId: string,
  payload: Record<string, unknown> = {},
): RunStreamEvent => ({
  offset,
  type,
  executionId,
  payload,
});
const exec = (id: string, epoch: number, startedAt: number, finishedAt: number | null): RunExecutionRow => ({
  id,
  jobId: J,
  epoch,
  startedAt,
  finishedAt,
});
const call = (
  executionId: string,
  epoch: number,
  startedAt: number,
  tool: ToolCallRecord["tool"] = "charge",
): ToolCallRecord => ({
  tool,
  key: `${J}:call_1`,
  jobId: J,
  executionId,
  epoch,
  startedAt,
  endedAt: startedAt + 10,
});

/** A job that ran its tool in epoch 1, lost its host in the final turn, and completed in epoch 2. */
function recovered(over: Partial<RunHistory> = {}): RunHistory {
  return {
    jobs: [{ id: J, state: "completed", recoveries: 1, output: "paid" }],
    executions: [exec(E1, 1, 1000, 3000), exec(E2, 2, 3500, 5000)],
    calls: [call(E1, 1, 1500)],
    streams: new Map([
      [
        J,
        [
          ev(1, "run.started", E1),
          ev(2, "model.turn", E1, { turn: 1, reason: "start" }),
          ev(3, "tool.call", E1),
          ev(4, "tool.result", E1),
          ev(5, "model.turn", E1, { turn: 2, reason: "tool_results" }),
          ev(6, "model.delta", E1, { text: "pa" }),
          ev(7, "run.recovered", E2, { reason: "host_lost" }),
          ev(8, "model.turn", E2, { turn: 2, reason: "recovered" }),
          ev(9, "model.delta", E2, { text: "pa" }),
          ev(10, "model.delta", E2, { text: "id" }),
          ev(11, "run.completed", E2, { output: "paid" }),
        ],
      ],
    ]),
    ...over,
  };
}

describe("the run checker", () => {
  it("accepts a job that continued in a second execution after its host died", () => {
    const r = checkRuns([J], recovered());
    expect(r.verdicts).toEqual([{ id: J, cls: "completed_after_recovery", reasons: [] }]);
    expect(r.anomalies).toBe(0);
    expect(r.recoveries).toBe(1);
  });

  it("flags executions that overlap, or an old one that never ended", () => {
    const overlap = checkRuns([J], recovered({ executions: [exec(E1, 1, 1000, 4000), exec(E2, 2, 3500, 5000)] }));
    expect(overlap.verdicts[0]?.cls).toBe("interleaved_executions");
    const open = checkRuns([J], recovered({ executions: [exec(E1, 1, 1000, null), exec(E2, 2, 3500, 5000)] }));
    expect(open.verdicts[0]?.reasons[0]).toContain("never ended");
  });

  it("flags a non-idempotent call made twice with one key, and counts an idempotent one", () => {
    const twice = checkRuns([J], recovered({ calls: [call(E1, 1, 1500), call(E2, 2, 3600)] }));
    expect(twice.verdicts[0]?.cls).toBe("tool_repeated");
    const lookup = checkRuns([J], recovered({ calls: [call(E1, 1, 1500, "lookup"), call(E2, 2, 3600, "lookup")] }));
    expect(lookup.anomalies).toBe(0);
    expect(lookup.idempotentRecalls).toBe(1);
  });

  it("flags a call an old execution began after its successor started", () => {
    const r = checkRuns([J], recovered({ calls: [call(E1, 1, 3700, "lookup")] }));
    expect(r.verdicts[0]?.cls).toBe("call_after_handoff");
    expect(r.verdicts[0]?.reasons[0]).toContain("200 ms after epoch 2 started");
  });

  it("flags a recovered job whose stream shows fewer or more run.recovered than recoveries, or one execution's twice", () => {
    const none = recovered();
    none.streams.set(
      J,
      (none.streams.get(J) as RunStreamEvent[])
        .filter((e) => e.type !== "run.recovered")
        .map((e, i) => ({ ...e, offset: i + 1 })),
    );
    expect(checkRuns([J], none).verdicts[0]?.cls).toBe("recovery_unseen");
    const more = recovered();
    more.jobs = [{ id: J, state: "completed", recoveries: 0, output: "paid" }];
    expect(checkRuns([J], more).verdicts[0]?.cls).toBe("recovery_unseen");
    // Two recoveries, one on the stream: the one whose execution died first is missing.
    const fewer = recovered();
    fewer.jobs = [{ id: J, state: "completed", recoveries: 2, output: "paid" }];
    expect(checkRuns([J], fewer).verdicts[0]?.reasons[0]).toContain("row says 2 recoveries, the stream has 1");
    // Two, but both of one execution (a projection repeated next to the host's own).
    const twice = recovered();
    twice.jobs = [{ id: J, state: "completed", recoveries: 2, output: "paid" }];
    const events = twice.streams.get(J) as RunStreamEvent[];
    twice.streams.set(J, [
      ...events.slice(0, 6),
      ev(7, "run.recovered", E2, { source: "projector", reason: "host_lost", from_step: 4 }),
      ...events.slice(6).map((e) => ({ ...e, offset: e.offset + 1 })),
    ]);
    expect(checkRuns([J], twice).verdicts[0]?.reasons.join()).toContain("not one each, in epoch order");
  });

  it("accepts a recovery projected from Postgres for an execution that died before its first event, and counts it", () => {
    const E3 = "e3";
    const h = recovered({
      executions: [exec(E1, 1, 1000, 3000), exec(E3, 2, 3100, 3300), exec(E2, 3, 3500, 5000)],
    });
    h.jobs = [{ id: J, state: "completed", recoveries: 2, output: "paid" }];
    const events = h.streams.get(J) as RunStreamEvent[];
    h.streams.set(J, [
      ...events.slice(0, 6),
      ev(7, "run.recovered", E3, { source: "projector", reason: "host_lost", from_step: 4 }),
      ...events.slice(6).map((e) => ({ ...e, offset: e.offset + 1 })),
    ]);
    const r = checkRuns([J], h);
    expect(r.anomalies).toBe(0);
    expect(r.recoveriesProjected).toBe(1);
    // The same two in the wrong order (the later execution's first) is not the history.
    const swapped = (h.streams.get(J) as RunStreamEvent[]).map((e) =>
      e.type === "run.recovered" ? { ...e, executionId: e.executionId === E3 ? E2 : E3 } : e,
    );
    h.streams.set(J, swapped);
    expect(checkRuns([J], h).verdicts[0]?.cls).toBe("recovery_unseen");
  });

  it("allows a charge made again only as often as a person approved it again", () => {
    const h = recovered({ calls: [call(E1, 1, 1500), call(E2, 2, 3600)] });
    h.approvals = new Map([[`${J}:call_1`, 2]]);
    const r = checkRuns([J], h);
    expect(r.anomalies).toBe(0);
    expect(r.reapproved).toBe(1);
    h.approvals = new Map([[`${J}:call_1`, 1]]);
    expect(checkRuns([J], h).verdicts[0]?.reasons[0]).toContain("(1 consented)");
  });

  it("a projected completion: its output must be the row's, and the deltas since the last restart a start of it", () => {
    const h = recovered();
    const upTo = (n: number) => (h.streams.get(J) as RunStreamEvent[]).filter((e) => e.offset <= n);
    const base = upTo(9);
    // The last execution delivered run.recovered and "pa", then died after its terminal write.
    h.streams.set(J, [...base, ev(10, "run.completed", E2, { source: "projector", output: "paid" })]);
    expect(checkRuns([J], h).anomalies).toBe(0);
    // Without the output: the client would be left with "pa" and nothing saying otherwise.
    h.streams.set(J, [...base, ev(10, "run.completed", E2, { source: "projector" })]);
    expect(checkRuns([J], h).verdicts[0]?.reasons.join()).toContain("completed output differs");
    // Deltas that are another answer than the output, even a projected one, are flagged.
    const wrong = [...upTo(8), ev(9, "model.delta", E2, { text: "no" })];
    h.streams.set(J, [...wrong, ev(10, "run.completed", E2, { source: "projector", output: "paid" })]);
    expect(checkRuns([J], h).verdicts[0]?.reasons.join()).toContain('rebuild "no"');
  });

  it("flags deltas that do not rebuild the output after the last restart point", () => {
    const h = recovered();
    const events = h.streams.get(J) as RunStreamEvent[];
    // Drop the recovered execution's first delta: what follows run.recovered reads "id".
    h.streams.set(
      J,
      events.filter((e) => e.offset !== 9).map((e, i) => ({ ...e, offset: i + 1 })),
    );
    const r = checkRuns([J], h);
    expect(r.verdicts[0]?.cls).toBe("stream_disagrees");
    expect(r.verdicts[0]?.reasons.join()).toContain('rebuild "id"');
  });

  it("flags a stream with two terminal events and a gap in its offsets", () => {
    const h = recovered();
    const events = h.streams.get(J) as RunStreamEvent[];
    h.streams.set(J, [...events.slice(0, 5), ...events.slice(6), ev(12, "run.failed", E1)]);
    const reasons = checkRuns([J], h).verdicts[0]?.reasons.join("; ") ?? "";
    expect(reasons).toContain("offset 7 at position 6");
    expect(reasons).toContain("2 terminal events");
  });

  it("flags a job left running and one never written", () => {
    const h = recovered();
    h.jobs = [{ id: J, state: "running", recoveries: 1, output: null }];
    h.streams = new Map();
    const other = "00000000-0000-4000-8000-000000000002";
    const r = checkRuns([J, other], h);
    expect(r.counts.stuck).toBe(1);
    expect(r.counts.missing).toBe(1);
    expect(r.anomalies).toBe(2);
  });
});
