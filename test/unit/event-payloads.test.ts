/**
 * The envelope is a union on `type`, each type with its payload schema. What a host emits and
 * what the projector writes from Postgres (test/workers/durable-objects/job-events/event-payloads.test.ts) must both validate (the gateway's ingest parses host
 * batches with it; chat frames carry projector events); a named field of the wrong type is
 * refused; fields beyond the named ones are kept as sent (the batch mac covers the raw bytes).
 */
import { describe, expect, it } from "vitest";
import { capEventPayload, EVENT_TYPES, EventEnvelopeSchema, IngestBatchSchema } from "../../src/contracts/events";

const JOB = "7d9f2c1e-0000-4000-8000-000000000001";
const EXEC = "7d9f2c1e-0000-4000-8000-000000000002";
const at = (seq: number, type: string, payload: unknown) => ({
  job_id: JOB,
  execution_id: EXEC,
  epoch: 1,
  seq,
  type,
  payload,
  ts: new Date().toISOString(),
});

/** One payload per type, as sandbox-host/runner/ emits them (the terminal ones: every outcome). */
const HOST_PAYLOADS: Array<[string, unknown]> = [
  ["run.started", {}],
  ["input.accepted", { input_id: "i-1", content: "and also this" }],
  ["run.prepared", {}],
  ["quota.waiting", { reason: "limit_reached", key: "model:m", ahead: 2 }],
  ["quota.waiting", { reason: "redis_unavailable", key: null, ahead: null }],
  ["model.turn", { turn: 1, reason: "start" }],
  ["model.turn", { turn: 3, reason: "repair" }],
  ["model.delta", { text: "hello" }],
  ["model.retry", { attempt: 1, delay_ms: 500, reason: "rate_limited", status: 429 }],
  ["tool.call", { id: "c1", name: "shell", args: { command: "ls" } }],
  ["sandbox.waiting", { ahead: 3 }],
  ["sandbox.created", {}],
  ["tool.result", { id: "c1", ok: true, output: { exit_code: 0, stdout: "", stderr: "" } }],
  ["tool.result", { id: "c1", ok: false, output: { code: "sandbox_error", message: "boom" } }],
  [
    "tool.approval_requested",
    { call_id: "c2", tool: "shell", arguments: { command: "rm x" }, deadline_at: "2026-12-02T00:00:00.000Z" },
  ],
  ["input.requested", { call_id: "c3", question: "which?", deadline_at: "2026-12-02T00:00:00.000Z" }],
  [
    "budget.exhausted",
    { call_id: "budget_2_0a1b2c3d", spent_usd: 0.035, limit_usd: 0.01, deadline_at: "2026-12-02T00:00:00.000Z" },
  ],
  ["run.suspended", { waiting_for: { kind: "approval", call_id: "c2", tool: "shell" } }],
  ["run.resumed", { call_id: "c2", decision: "approve", by: "api", waited_ms: 1200 }],
  ["run.resumed", { call_id: "c3", decision: "deny", by: "deadline", waited_ms: 86_400_000 }],
  [
    "run.recovered",
    { reason: "host_lost", from_step: 3, discarded_turn: false, unknown_calls: ["c2"], sandbox_reset: true },
  ],
  [
    "run.recovered",
    { reason: "host_shutdown", from_step: 0, discarded_turn: true, unknown_calls: [], sandbox_reset: false },
  ],
  ["run.forked", { from_job: "0b9f7a4e-5c1d-4a57-9d43-2f0e8f3c6a11", from_step: 6 }],
  ["cancel.accepted", { via: "hint" }],
  ["cancel.accepted", { via: null }],
  ["run.suspended", { waiting_for: { kind: "children", call_id: "c4", tool: "delegate_worker" } }],
  ["run.resumed", { call_id: "c4", decision: "children", by: "children", waited_ms: 900 }],
  ["child.created", { job_id: "0b9f7a4e-5c1d-4a57-9d43-2f0e8f3c6a11", call_id: "c4", agent: "worker" }],
  [
    "child.finished",
    { job_id: "0b9f7a4e-5c1d-4a57-9d43-2f0e8f3c6a11", call_id: "c4", state: "completed", error: null },
  ],
  [
    "child.finished",
    {
      job_id: "0b9f7a4e-5c1d-4a57-9d43-2f0e8f3c6a11",
      call_id: "c5",
      state: "lost",
      error: { code: "lost", message: "the host running the job stopped" },
    },
  ],
  ["run.completed", { output: "done" }],
  ["run.failed", { error: { code: "rate_limited", message: "slow down" } }],
  ["run.cancelled", { output: null }],
  ["run.cancelled", { output: "partial" }],
];

describe("event payloads", () => {
  it("every host payload validates, and a batch of them passes the ingest schema unchanged", () => {
    const events = HOST_PAYLOADS.map(([type, payload], i) => at(i + 1, type, payload));
    for (const e of events) expect(EventEnvelopeSchema.safeParse(e).error?.issues ?? []).toEqual([]);
    const batch = { job_id: JOB, events, mac: "0".repeat(64) };
    expect(IngestBatchSchema.parse(batch)).toEqual(batch);
    // Every type a host emits is covered above.
    const hostTypes = new Set(HOST_PAYLOADS.map(([t]) => t));
    expect(EVENT_TYPES.filter((t) => !hostTypes.has(t))).toEqual(["run.lost", "run.timed_out", "run.expired"]);
  });

  it("refuses a named field of the wrong type, and a payload missing for its type", () => {
    expect(EventEnvelopeSchema.safeParse(at(1, "model.delta", { text: 5 })).success).toBe(false);
    expect(EventEnvelopeSchema.safeParse(at(1, "model.delta", {})).success).toBe(false);
    expect(EventEnvelopeSchema.safeParse(at(1, "run.failed", { error: "boom" })).success).toBe(false);
    expect(EventEnvelopeSchema.safeParse(at(1, "cancel.accepted", { via: "telepathy" })).success).toBe(false);
    expect(EventEnvelopeSchema.safeParse(at(1, "run.lost", {})).success).toBe(false);
    expect(EventEnvelopeSchema.safeParse(at(1, "no.such.type", {})).success).toBe(false);
  });

  it("keeps fields beyond the named ones, as sent", () => {
    const e = at(1, "model.delta", { text: "t", sent_at: 12.5 });
    expect(EventEnvelopeSchema.parse(e).payload).toEqual({ text: "t", sent_at: 12.5 });
  });
});

describe("capEventPayload: a payload bigger than an event may hold", () => {
  const bytes = (v: unknown) => Buffer.byteLength(JSON.stringify(v));

  it("keeps one that fits as the same object, and never cuts inside a surrogate pair", () => {
    const small = { id: "c1", ok: true, output: { content: "x" } };
    expect(capEventPayload(small)).toEqual({ payload: small, bytes: bytes(small), truncatedFrom: null });
    const emoji = "\u{1F600}".repeat(100_000);
    const { payload } = capEventPayload({ text: emoji }, 10_000);
    expect(payload.text.length % 2).toBe(0);
    expect(emoji.startsWith(payload.text)).toBe(true);
    expect(bytes(payload)).toBeLessThanOrEqual(10_000);
  });

  it("nulls the largest field when only short strings make it big (a long directory listing)", () => {
    const entries = Array.from({ length: 20_000 }, (_, i) => ({ name: `f${i}`, type: "file", size: i }));
    const big = { id: "c1", ok: true, output: { path: "/workspace", entries } };
    const { payload, truncatedFrom } = capEventPayload(big, 64 * 1024);
    expect(payload).toEqual({ id: "c1", ok: true, output: null, truncated: true, original_bytes: bytes(big) });
    expect(truncatedFrom).toBe(bytes(big));
    expect(big.output.entries).toHaveLength(20_000);
  });
});
