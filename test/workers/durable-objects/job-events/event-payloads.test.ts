/**
 * The projector's own events (terminal, started and recovered events written from Postgres) validate
 * against the envelope union, as every host batch must (test/unit/event-payloads.test.ts): chat
 * frames and the OpenAPI document describe both with the one schema.
 */
import { describe, expect, it } from "vitest";
import { type EventEnvelope, EventEnvelopeSchema } from "../../../../src/contracts/events";
import {
  type ExecutionHistoryEntry,
  projectedFirstEvents,
  projectedStarted,
  projectedTerminal,
} from "../../../../workers/durable-objects/job-events/postgres-facts";

const JOB = "7d9f2c1e-0000-4000-8000-000000000001";
const EXEC = "7d9f2c1e-0000-4000-8000-000000000002";

describe("projected event payloads", () => {
  it("the projector's own events validate", () => {
    const base = { executionId: EXEC, epoch: 3, finishedAt: new Date(0), startedAt: new Date(0) };
    const projected: Array<EventEnvelope | null> = [
      projectedStarted(JOB, { ...base, state: "lost", output: null, error: null }),
      projectedTerminal(JOB, { ...base, state: "lost", output: null, error: { code: "lost", message: "silent" } }),
      projectedTerminal(JOB, {
        ...base,
        state: "timed_out",
        output: null,
        error: { code: "timed_out", message: "late" },
      }),
      projectedTerminal(JOB, { ...base, state: "completed", output: "out", error: null }),
      projectedTerminal(JOB, {
        ...base,
        state: "failed",
        output: null,
        error: { code: "internal_error", message: "y" },
      }),
      projectedTerminal(JOB, {
        ...base,
        executionId: null,
        state: "cancelled",
        output: null,
        error: { code: "cancelled", message: "before start" },
      }),
    ];
    // A first execution lost, one recovery that died before its journal row, one after it.
    const history: ExecutionHistoryEntry[] = [
      { executionId: EXEC, epoch: 1, startedAt: new Date(0), outcome: "lost", recovered: null, fromStep: 0 },
      {
        executionId: crypto.randomUUID(),
        epoch: 3,
        startedAt: new Date(0),
        outcome: "lost",
        recovered: null,
        fromStep: 2,
      },
      {
        executionId: crypto.randomUUID(),
        epoch: 5,
        startedAt: new Date(0),
        outcome: null,
        recovered: {
          reason: "host_lost",
          from_step: 2,
          discarded_turn: true,
          unknown_calls: ["c1"],
          sandbox_reset: false,
        },
        fromStep: 2,
      },
    ];
    const firsts = projectedFirstEvents(JOB, history, 6);
    expect(firsts.map((e) => [e.type, e.epoch, e.payload])).toEqual([
      ["run.started", 1, { source: "projector" }],
      ["run.recovered", 3, { source: "projector", reason: "host_lost", from_step: 2 }],
      [
        "run.recovered",
        5,
        {
          source: "projector",
          reason: "host_lost",
          from_step: 2,
          discarded_turn: true,
          unknown_calls: ["c1"],
          sandbox_reset: false,
        },
      ],
    ]);
    // A hand-off reads host_shutdown; an execution resuming from a wait gets nothing projected.
    const handedOff: ExecutionHistoryEntry[] = [
      { ...(history[0] as ExecutionHistoryEntry), outcome: "handed_off" },
      { ...(history[1] as ExecutionHistoryEntry), outcome: "suspended" },
      { ...(history[2] as ExecutionHistoryEntry), recovered: null },
    ];
    expect(projectedFirstEvents(JOB, handedOff, 6).map((e) => [e.type, e.epoch, e.payload.reason])).toEqual([
      ["run.started", 1, undefined],
      ["run.recovered", 3, "host_shutdown"],
    ]);
    // A fork's first execution opens with run.forked (from the row's forked_from_*), whether or
    // not it wrote its journal row; its later recoveries are run.recovered as for any job.
    const source = crypto.randomUUID();
    const forked: ExecutionHistoryEntry[] = [
      { ...(history[0] as ExecutionHistoryEntry), forkedFrom: { jobId: source, step: 6 } },
      { ...(history[1] as ExecutionHistoryEntry), forkedFrom: { jobId: source, step: 6 } },
    ];
    const forkFirsts = projectedFirstEvents(JOB, forked, 6);
    expect(forkFirsts.map((e) => [e.type, e.epoch, e.payload])).toEqual([
      ["run.forked", 1, { source: "projector", from_job: source, from_step: 6 }],
      ["run.recovered", 3, { source: "projector", reason: "host_lost", from_step: 2 }],
    ]);
    projected.push(...firsts, ...forkFirsts);
    expect(projected.every((e) => e !== null)).toBe(true);
    for (const e of projected) expect(EventEnvelopeSchema.safeParse(e).error?.issues ?? []).toEqual([]);
  });
});
