/**
 * The checker must be able to fail: each anomaly class is fed as a synthetic history and must be
 * reported, and the valid histories (including a released-then-reclaimed job) must not be.
 */
import { describe, expect, it } from "vitest";
import { checkHistory, type StreamEvent, type StreamRow, streamDisagreements } from "./checker";
import type { ExecutionRow, History, JobChange, JobFinal } from "./history";

let seq = 0;
const J = "00000000-0000-0000-0000-00000000000a";
const T1 = "10000000-0000-0000-0000-000000000001";
const T2 = "10000000-0000-0000-0000-000000000002";
const E1 = "20000000-0000-0000-0000-000000000001";
const E2 = "20000000-0000-0000-0000-000000000002";

type Id = { owner: string | null; epoch: number; token: string | null; exec: string | null };
function change(oldState: string, newState: string, o: Id, n: Id, extra: Partial<JobChange> = {}): JobChange {
  return {
    seq: ++seq,
    jobId: J,
    oldState,
    newState,
    oldOwner: o.owner,
    newOwner: n.owner,
    oldEpoch: o.epoch,
    newEpoch: n.epoch,
    oldToken: o.token,
    newToken: n.token,
    oldExec: o.exec,
    newExec: n.exec,
    heartbeatMoved: false,
    timingMoved: false,
    outputMoved: false,
    ...extra,
  };
}
const none: Id = { owner: null, epoch: 0, token: null, exec: null };
const claimA: Id = { owner: "A", epoch: 1, token: T1, exec: null };
const runA: Id = { ...claimA, exec: E1 };
const released: Id = { owner: null, epoch: 1, token: null, exec: null };
const claimB: Id = { owner: "B", epoch: 2, token: T2, exec: null };
const runB: Id = { ...claimB, exec: E2 };

const final = (state: string, id: Id): JobFinal => ({
  id: J,
  state,
  owner: id.owner,
  epoch: id.epoch,
  token: id.token,
  executionId: id.exec,
  claimedAt: null,
});
const exec = (id: string, host: string, epoch: number, outcome: string | null): ExecutionRow => ({
  id,
  jobId: J,
  host,
  epoch,
  outcome,
});

function history(p: Partial<History>): History {
  return { jobs: [], executions: [], jobChanges: [], executionChanges: [], ...p };
}

const happy = () =>
  history({
    jobs: [final("completed", runA)],
    executions: [exec(E1, "A", 1, "completed")],
    jobChanges: [
      change("queued", "queued", none, claimA),
      change("queued", "running", claimA, runA),
      change("running", "running", runA, runA, { heartbeatMoved: true }),
      change("running", "completed", runA, runA),
    ],
  });

describe("claims checker", () => {
  it("passes a clean run and a released-then-reclaimed one", () => {
    expect(checkHistory([J], happy()).counts.completed_once).toBe(1);
    const requeued = checkHistory(
      [J],
      history({
        jobs: [final("completed", runB)],
        executions: [exec(E2, "B", 2, "completed")],
        jobChanges: [
          change("queued", "queued", none, claimA),
          change("queued", "queued", claimA, released),
          change("queued", "queued", released, claimB),
          change("queued", "running", claimB, runB),
          change("running", "completed", runB, runB),
        ],
      }),
    );
    expect(requeued.counts.requeued_then_completed).toBe(1);
    expect(requeued.releases).toBe(1);
    expect(requeued.anomalies).toBe(0);
  });

  it("accepts lost only after a start", () => {
    const lost = history({
      jobs: [final("lost", runA)],
      executions: [exec(E1, "A", 1, "lost")],
      jobChanges: [
        change("queued", "queued", none, claimA),
        change("queued", "running", claimA, runA),
        change("running", "lost", runA, runA),
      ],
    });
    expect(checkHistory([J], lost).counts.lost).toBe(1);
    const unstarted = history({
      jobs: [final("lost", claimA)],
      jobChanges: [change("queued", "queued", none, claimA), change("queued", "lost", claimA, claimA)],
    });
    const r = checkHistory([J], unstarted);
    expect(r.anomalies).toBe(1);
    expect(r.verdicts[0]?.cls).toMatch(/stale_write_accepted|lost_without_start/);
  });

  it("flags a double start: two executions, or a second started CAS", () => {
    const h = happy();
    h.executions.push(exec(E2, "B", 2, null));
    expect(checkHistory([J], h).counts.double_started).toBe(1);
    const twice = history({
      jobs: [final("completed", runB)],
      executions: [exec(E2, "B", 2, "completed")],
      jobChanges: [
        change("queued", "queued", none, claimA),
        change("queued", "running", claimA, runA),
        change("running", "queued", runA, released),
        change("queued", "queued", released, claimB),
        change("queued", "running", claimB, runB),
        change("running", "completed", runB, runB),
      ],
    });
    expect(checkHistory([J], twice).counts.double_started).toBe(1);
  });

  it("passes a recovered job (executions one after another) and flags one whose executions overlap", () => {
    const requeued: Id = { owner: null, epoch: 2, token: null, exec: null };
    const claimC: Id = { owner: "B", epoch: 3, token: T2, exec: null };
    const runC: Id = { ...claimC, exec: E2 };
    const recovered = (firstOutcome: string | null) =>
      history({
        jobs: [final("completed", runC)],
        executions: [exec(E1, "A", 1, firstOutcome), exec(E2, "B", 3, "completed")],
        jobChanges: [
          change("queued", "queued", none, claimA),
          change("queued", "running", claimA, runA),
          change("running", "queued", runA, requeued),
          change("queued", "queued", requeued, claimC),
          change("queued", "running", claimC, runC),
          change("running", "completed", runC, runC),
        ],
      });
    const ok = checkHistory([J], recovered("lost"));
    expect(ok.counts.recovered_then_completed).toBe(1);
    expect(ok.anomalies).toBe(0);
    // The first execution never ended: two were open at once.
    const open = checkHistory([J], recovered(null));
    expect(open.anomalies).toBe(1);
    expect(open.verdicts[0]?.reasons.join()).toContain("before a recovery ended null");
    expect(checkHistory([J], recovered("handed_off")).anomalies).toBe(0);
    // A recovered job's stream: run.started of the first execution, run.recovered of the row's.
    const row: StreamRow = { id: J, state: "completed", executionId: E2, started: true, output: "ok" };
    const ev = (offset: number, type: string, executionId: string, payload = {}): StreamEvent => ({
      offset,
      type,
      executionId,
      payload,
    });
    const stream = [
      ev(1, "run.started", E1),
      ev(2, "model.delta", E1),
      ev(3, "run.recovered", E2),
      ev(4, "run.completed", E2, { output: "ok" }),
    ];
    expect(streamDisagreements(row, stream)).toEqual([]);
    const noRecovered = [stream[0], { ...stream[3], offset: 2 }] as StreamEvent[];
    expect(streamDisagreements(row, noRecovered)).toEqual([
      "row started, stream has 1 run.started (0 first events of its execution)",
    ]);
  });

  it("flags stale writes: after terminal, mismatched start, identity switch, overwritten outcome", () => {
    const afterTerminal = happy();
    afterTerminal.jobChanges.push(change("completed", "completed", runA, runA, { timingMoved: true }));
    expect(checkHistory([J], afterTerminal).counts.stale_write_accepted).toBe(1);

    const badStart = history({
      jobs: [final("completed", runB)],
      executions: [exec(E2, "B", 2, "completed")],
      jobChanges: [
        change("queued", "queued", none, claimA),
        change("queued", "queued", claimA, released),
        change("queued", "queued", released, claimB),
        // A's late started CAS with its old token, accepted:
        change("queued", "running", claimB, { ...claimB, token: T1, exec: E2 }),
        change("running", "completed", { ...claimB, token: T1, exec: E2 }, { ...claimB, token: T1, exec: E2 }),
      ],
    });
    expect(checkHistory([J], badStart).counts.stale_write_accepted).toBe(1);

    const takeover = history({
      jobs: [final("queued", claimB)],
      jobChanges: [change("queued", "queued", none, claimA), change("queued", "queued", claimA, claimB)],
    });
    expect(checkHistory([J], takeover).counts.stale_write_accepted).toBe(1);

    const overwritten = happy();
    overwritten.executionChanges.push({ seq: ++seq, executionId: E1, oldOutcome: "lost", newOutcome: "completed" });
    expect(checkHistory([J], overwritten).counts.stale_write_accepted).toBe(1);

    const foreignExec = happy();
    foreignExec.executions[0] = exec(E1, "B", 1, "completed");
    expect(checkHistory([J], foreignExec).counts.stale_write_accepted).toBe(1);
  });

  it("flags stuck jobs and leaked claims, missing and unexpected rows", () => {
    const leaked = history({ jobs: [final("queued", claimA)], jobChanges: [change("queued", "queued", none, claimA)] });
    const r = checkHistory([J], leaked);
    expect(r.counts.stuck).toBe(1);
    expect(r.leakedClaims).toBe(1);
    expect(checkHistory([J], history({})).counts.missing).toBe(1);
    expect(checkHistory([], happy()).counts.unexpected).toBe(1);
  });
});

describe("stream vs row", () => {
  const E = "20000000-0000-0000-0000-000000000009";
  const row = (over: Partial<StreamRow> = {}): StreamRow => ({
    id: J,
    state: "completed",
    executionId: E,
    started: true,
    output: "hello",
    ...over,
  });
  const ev = (offset: number, type: string, payload: Record<string, unknown> = {}, executionId = E): StreamEvent => ({
    offset,
    type,
    executionId,
    payload,
  });
  const good = [
    ev(1, "run.started"),
    ev(2, "model.delta", { text: "hello" }),
    ev(3, "run.completed", { output: "hello" }),
  ];

  it("accepts a stream that says what the row says", () => {
    expect(streamDisagreements(row(), good)).toEqual([]);
    expect(
      streamDisagreements(row({ state: "cancelled", executionId: null, started: false, output: null }), [
        ev(1, "run.cancelled", {}, "projector"),
      ]),
    ).toEqual([]);
    expect(
      streamDisagreements(row({ state: "lost", output: null }), [
        ev(1, "run.started", { source: "projector" }),
        ev(2, "run.lost", { source: "projector" }),
      ]),
    ).toEqual([]);
  });

  it("reports run.lost with no run.started for a row that started (the host died with it in memory)", () => {
    expect(streamDisagreements(row({ state: "lost", output: null }), [ev(1, "run.lost")])).toEqual([
      "row started, stream has 0 run.started (0 first events of its execution)",
    ]);
  });

  it("reports a forged output, a wrong terminal, two terminals, no terminal, a gap and a late start", () => {
    expect(
      streamDisagreements(row(), [
        good[0],
        good[1],
        ev(3, "run.completed", { output: "FORGED OUTPUT" }),
      ] as StreamEvent[]),
    ).toEqual(["completed output differs from the row's"]);
    expect(streamDisagreements(row({ state: "failed" }), good)).toEqual(["stream ends run.completed, row is failed"]);
    expect(streamDisagreements(row(), [...good, ev(4, "run.lost")])).toHaveLength(2);
    expect(streamDisagreements(row(), good.slice(0, 2))).toEqual(["0 terminal events (none)"]);
    expect(streamDisagreements(row(), [good[0], ev(3, "run.completed", { output: "hello" })] as StreamEvent[])).toEqual(
      ["offset 3 at position 2"],
    );
    expect(streamDisagreements(row({ state: "lost" }), [ev(1, "run.lost"), ev(2, "run.started")]).join()).toMatch(
      /not the last event|after the terminal/,
    );
    expect(streamDisagreements(row({ started: false, executionId: null }), good).length).toBeGreaterThan(0);
  });
});
