/**
 * The projector under the conditions hosts and networks really produce: out-of-order batches, a
 * gap filled late, a full gap buffer, epochs changing mid-stream, reconnects, many subscribers,
 * slow readers, and a job whose terminal state only Postgres knows (alarm-driven).
 */
import { runDurableObjectAlarm, runInDurableObject } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import type { EventEnvelope } from "../../../../src/contracts/events";
import { GAP_BUFFER_MAX_BYTES, GAP_BUFFER_MAX_EVENTS } from "../../../../workers/durable-objects/job-events/event-log";
import type { JobEventsObject } from "../../../../workers/durable-objects/job-events/job-events-object";
import {
  HOST_BACKLOG_GRACE_MS,
  HOST_TERMINAL_GRACE_MS,
  type JobStateFacts,
  PROJECTED_TERMINAL_SEQ,
} from "../../../../workers/durable-objects/job-events/postgres-facts";
import { batch, envelope, ingest, newJob, offsets, SseReader, setJobRow } from "../../helpers";

type Stub = DurableObjectStub<JobEventsObject>;

function subscribe(stub: Stub, jobId: string, after = 0): Promise<Response> {
  return stub.fetch(`https://job-events/events?after=${after}&job_id=${jobId}`);
}

const range = (from: number, to: number) => Array.from({ length: to - from + 1 }, (_, i) => from + i);

async function answerForPostgres(
  stub: Stub,
  facts: JobStateFacts | Error,
  opts: { liveHostQuietMs?: number } = {},
): Promise<string[]> {
  const jobId = (await runInDurableObject(stub, (instance: JobEventsObject) => {
    // These tests are about what Postgres answers: ask on every alarm, however recent the events.
    instance.terminal.liveHostQuietMs = opts.liveHostQuietMs ?? 0;
    return jobIdOf.get(stub) ?? "";
  })) as string;
  const row = await setJobRow(stub, jobId, facts);
  return row.asked;
}

/** Which job a stub belongs to, for answerForPostgres. */
const jobIdOf = new Map<Stub, string>();
function job(): { jobId: string; stub: Stub } {
  const j = newJob();
  jobIdOf.set(j.stub, j.jobId);
  return j;
}

const runningFacts: JobStateFacts = {
  state: "running",
  executionId: "exec-a",
  epoch: 1,
  output: null,
  error: null,
  finishedAt: null,
  startedAt: null,
};

describe("projector ordering", () => {
  it("appends out-of-order batches in seq order with contiguous offsets", async () => {
    const { jobId, stub } = job();
    for (const seqs of [[4, 5], [2], [7], [1], [6], [3]]) await ingest(stub, batch(jobId, "exec-a", 1, seqs));
    const log = await offsets(stub);
    expect(log.map((e) => e.seq)).toEqual([1, 2, 3, 4, 5, 6, 7]);
    expect(log.map((e) => e.offset)).toEqual([1, 2, 3, 4, 5, 6, 7]);
  });

  it("a live subscriber sees out-of-order arrivals only once they are contiguous", async () => {
    const { jobId, stub } = job();
    const sse = new SseReader(await subscribe(stub, jobId));
    await ingest(stub, batch(jobId, "exec-a", 1, [2, 3]));
    await expect(sse.next(300)).rejects.toThrow(/timed out/); // nothing before seq 1
    await ingest(stub, batch(jobId, "exec-a", 1, [1]));
    expect((await sse.take(3)).map((e) => [e.id, e.data.seq])).toEqual([
      [1, 1],
      [2, 2],
      [3, 3],
    ]);
    await sse.cancel();
  });

  it("refuses events beyond the gap buffer's event bound without storing them; the resend lands", async () => {
    const { jobId, stub } = job();
    const far = GAP_BUFFER_MAX_EVENTS + 11;
    const first = await ingest(stub, batch(jobId, "exec-a", 1, range(2, 1001)));
    expect(first).toMatchObject({ ok: true, ack: { acked_seq: 0, buffered: 1000, deferred: 0 } });
    const second = await ingest(stub, batch(jobId, "exec-a", 1, range(1002, far)));
    expect(second).toMatchObject({
      ok: true,
      ack: { acked_seq: 0, buffered: GAP_BUFFER_MAX_EVENTS, deferred: far - 1 - GAP_BUFFER_MAX_EVENTS },
    });
    expect(await offsets(stub)).toEqual([]);
    // seq 1 releases everything buffered; what was refused is not there yet...
    const filled = await ingest(stub, batch(jobId, "exec-a", 1, [1]));
    expect(filled).toMatchObject({ ok: true, ack: { acked_seq: GAP_BUFFER_MAX_EVENTS + 1, buffered: 0 } });
    // ...until the host resends from acked_seq + 1.
    const resent = await ingest(stub, batch(jobId, "exec-a", 1, range(GAP_BUFFER_MAX_EVENTS + 2, far)));
    expect(resent).toMatchObject({ ok: true, ack: { acked_seq: far, accepted: far - GAP_BUFFER_MAX_EVENTS - 1 } });
    const log = await offsets(stub);
    expect(log.map((e) => e.seq)).toEqual(range(1, far));
    expect(log.map((e) => e.offset)).toEqual(range(1, far));
  });

  it("bounds the gap buffer by bytes too", async () => {
    const { jobId, stub } = job();
    const big = "x".repeat(200 * 1024);
    const events = range(2, 9).map((s) => envelope(jobId, "exec-a", 1, s, "model.delta", { text: big }));
    const out = await ingest(stub, { job_id: jobId, events });
    const fits = Math.floor(GAP_BUFFER_MAX_BYTES / (big.length + 200));
    expect(out).toMatchObject({ ok: true, ack: { acked_seq: 0, buffered: fits, deferred: 8 - fits } });
  });

  it("a newer epoch mid-stream retires the old generation and its gap buffer; subscribers see one ordered stream", async () => {
    const { jobId, stub } = job();
    const sse = new SseReader(await subscribe(stub, jobId));
    await ingest(stub, batch(jobId, "exec-a", 1, [1, 2]));
    await ingest(stub, batch(jobId, "exec-a", 1, [4])); // held behind a gap
    await ingest(stub, batch(jobId, "exec-b", 2, [1, 2]));
    // The old generation's late seq 3 is refused, and its buffered seq 4 never appears.
    expect(await ingest(stub, batch(jobId, "exec-a", 1, [3]))).toMatchObject({ ok: false, reason: "stale_epoch" });
    await ingest(stub, { job_id: jobId, events: [envelope(jobId, "exec-b", 2, 3, "run.completed", { output: "ok" })] });
    const seen = (await sse.rest()).map((e) => [e.id, e.data.execution_id, e.data.seq]);
    expect(seen).toEqual([
      [1, "exec-a", 1],
      [2, "exec-a", 2],
      [3, "exec-b", 1],
      [4, "exec-b", 2],
      [5, "exec-b", 3],
    ]);
    await runInDurableObject(stub, (_i, state) => {
      expect(state.storage.sql.exec("SELECT count(*) AS n FROM gap_buffer").one().n).toBe(0);
    });
  });

  it("a buffered terminal event ends the job once the gap before it is filled; later seqs are dropped", async () => {
    const { jobId, stub } = job();
    await ingest(stub, {
      job_id: jobId,
      events: [
        envelope(jobId, "exec-a", 1, 3, "run.failed", { error: { code: "x" } }),
        envelope(jobId, "exec-a", 1, 4),
      ],
    });
    await ingest(stub, batch(jobId, "exec-a", 1, [1, 2]));
    expect((await offsets(stub)).map((e) => [e.seq, e.type])).toEqual([
      [1, "model.delta"],
      [2, "model.delta"],
      [3, "run.failed"],
    ]);
    expect(await ingest(stub, batch(jobId, "exec-a", 1, [4]))).toMatchObject({ ok: false, reason: "job_finished" });
  });
});

describe("projector streams", () => {
  it("a reconnect mid-stream with the last id seen gets the rest: no duplicate, no gap", async () => {
    const { jobId, stub } = job();
    await ingest(stub, batch(jobId, "exec-a", 1, range(1, 5)));
    const first = new SseReader(await subscribe(stub, jobId));
    const before = await first.take(3);
    await first.cancel(); // the client drops after id 3
    await ingest(stub, batch(jobId, "exec-a", 1, range(6, 9)));
    const second = new SseReader(await subscribe(stub, jobId, before.at(-1)?.id));
    await ingest(stub, { job_id: jobId, events: [envelope(jobId, "exec-a", 1, 10, "run.completed", { output: "" })] });
    const after = await second.rest();
    expect([...before, ...after].map((e) => e.id)).toEqual(range(1, 10));
    expect([...before, ...after].map((e) => e.data.seq)).toEqual(range(1, 10));
  });

  it("100 concurrent subscribers on one job all receive the identical sequence", async () => {
    const { jobId, stub } = job();
    await ingest(stub, batch(jobId, "exec-a", 1, range(1, 10)));
    const readers = await Promise.all(range(1, 100).map(async () => new SseReader(await subscribe(stub, jobId))));
    const collected = readers.map((r) => r.rest());
    for (let s = 11; s <= 60; s += 5) await ingest(stub, batch(jobId, "exec-a", 1, range(s, s + 4)));
    await ingest(stub, { job_id: jobId, events: [envelope(jobId, "exec-a", 1, 61, "run.completed", { output: "" })] });
    const all = await Promise.all(collected);
    const reference = all[0]?.map((e) => `${e.id}:${e.event}:${JSON.stringify(e.data)}`);
    expect(reference).toHaveLength(61);
    expect(all[0]?.map((e) => e.id)).toEqual(range(1, 61));
    for (const got of all) expect(got.map((e) => `${e.id}:${e.event}:${JSON.stringify(e.data)}`)).toEqual(reference);
  });

  it("cuts off a subscriber that stops reading instead of buffering without bound; it resumes by cursor", async () => {
    const { jobId, stub } = job();
    const slow = new SseReader(await subscribe(stub, jobId));
    const fast = new SseReader(await subscribe(stub, jobId));
    const fastEvents = fast.take(400);
    await ingest(stub, batch(jobId, "exec-a", 1, [1, 2]));
    const seen = await slow.take(2);
    // 400 separate appends while `slow` reads nothing: over the 256 queued-chunk limit.
    for (let s = 3; s <= 400; s++) await ingest(stub, batch(jobId, "exec-a", 1, [s]));
    expect((await fastEvents).map((e) => e.id)).toEqual(range(1, 400));
    // The slow stream ends (aborted) well before event 400; what it delivered is a clean prefix.
    const tail: number[] = [];
    try {
      for (let e = await slow.next(); e; e = await slow.next()) tail.push(e.id);
    } catch (err) {
      expect(String(err)).not.toMatch(/timed out/);
    }
    const delivered = [...seen.map((e) => e.id), ...tail];
    expect(delivered).toEqual(range(1, delivered.length));
    expect(delivered.length).toBeLessThan(400);
    const resumed = new SseReader(await subscribe(stub, jobId, delivered.at(-1)));
    expect((await resumed.take(400 - delivered.length)).map((e) => e.id)).toEqual(range(delivered.length + 1, 400));
    await resumed.cancel();
    await fast.cancel();
  });
});

describe("projector terminal from Postgres", () => {
  it("writes run.lost from Postgres for a watched job whose host died, closes the stream, and refuses the host after", async () => {
    const { jobId, stub } = job();
    await ingest(stub, batch(jobId, "exec-a", 1, [1, 2]));
    const sse = new SseReader(await subscribe(stub, jobId));
    const asked = await answerForPostgres(stub, runningFacts);
    expect(await runDurableObjectAlarm(stub)).toBe(true);
    expect(asked).toEqual([jobId]);
    expect((await sse.take(2)).map((e) => e.id)).toEqual([1, 2]); // still running: nothing projected

    const askedLost = await answerForPostgres(stub, {
      ...runningFacts,
      state: "lost",
      error: { code: "lost", message: "host stopped heartbeating" },
      finishedAt: new Date(),
    });
    expect(await runDurableObjectAlarm(stub)).toBe(true); // rescheduled while someone watches
    const rest = await sse.rest();
    expect(rest.map((e) => [e.id, e.event])).toEqual([[3, "run.lost"]]);
    const projected = rest[0]?.data as EventEnvelope;
    expect(projected).toMatchObject({
      job_id: jobId,
      execution_id: "exec-a",
      epoch: 1,
      seq: PROJECTED_TERMINAL_SEQ,
      type: "run.lost",
      payload: { source: "projector", error: { code: "lost" } },
    });
    expect(await ingest(stub, batch(jobId, "exec-a", 1, [3]))).toMatchObject({ ok: false, reason: "job_finished" });
    expect(await ingest(stub, batch(jobId, "exec-b", 2, [1]))).toMatchObject({ ok: false, reason: "job_finished" });
    // Finished: no more terminal checks (Postgres is not asked again); the one alarm now counts
    // down the event log's retention (7 days by default).
    const before = askedLost.length;
    const due = await runInDurableObject(stub, (_i, state) => state.storage.getAlarm());
    expect(due).toBeGreaterThan(Date.now() + 6 * 86_400_000);
    expect(await runDurableObjectAlarm(stub)).toBe(true);
    expect(askedLost.length).toBe(before);
    expect(await runInDurableObject(stub, (_i, state) => state.storage.getAlarm())).toBe(due);
  });

  it("a resumed execution whose host died: run.lost follows its own events, with no projected run.started", async () => {
    const { jobId, stub } = job();
    await ingest(stub, {
      job_id: jobId,
      events: [
        envelope(jobId, "exec-b", 2, 1, "run.resumed", { call_id: "c1", decision: "approve", by: "api", waited_ms: 5 }),
        envelope(jobId, "exec-b", 2, 2, "tool.call", { id: "c1", name: "shell", args: {} }),
      ],
    });
    await answerForPostgres(stub, {
      ...runningFacts,
      executionId: "exec-b",
      epoch: 2,
      state: "lost",
      error: { code: "lost", message: "host stopped heartbeating" },
      finishedAt: new Date(),
      startedAt: new Date(Date.now() - 10_000),
    });
    await runDurableObjectAlarm(stub);
    expect((await offsets(stub)).map((e) => e.type)).toEqual(["run.resumed", "tool.call", "run.lost"]);
  });

  it("projects no terminal event while the run's sandbox cleanup fence is set, and does once it is clear", async () => {
    const { jobId, stub } = job();
    await ingest(stub, batch(jobId, "exec-a", 1, [1]));
    await subscribe(stub, jobId);
    const lost: JobStateFacts = {
      ...runningFacts,
      state: "lost",
      error: { code: "lost", message: "host stopped heartbeating" },
      finishedAt: new Date(),
      startedAt: new Date(),
    };
    const asked = await answerForPostgres(stub, { ...lost, cleanupPending: true });
    expect(await runDurableObjectAlarm(stub)).toBe(true);
    expect(asked).toEqual([jobId]);
    expect((await offsets(stub)).map((e) => e.type)).toEqual(["model.delta"]);
    // Still watched and unfinished: the check is scheduled again.
    expect(await runInDurableObject(stub, (_i, state) => state.storage.getAlarm())).not.toBeNull();

    await answerForPostgres(stub, { ...lost, cleanupPending: false });
    expect(await runDurableObjectAlarm(stub)).toBe(true);
    expect((await offsets(stub)).map((e) => e.type)).toEqual(["model.delta", "run.lost"]);
  });

  it("a job cancelled while queued (no events at all) gets run.cancelled", async () => {
    const { jobId, stub } = job();
    const sse = new SseReader(await subscribe(stub, jobId));
    await answerForPostgres(stub, {
      state: "cancelled",
      executionId: null,
      epoch: 0,
      output: null,
      error: { code: "cancelled", message: "cancelled before it started" },
      finishedAt: new Date(),
      startedAt: null,
    });
    expect(await runDurableObjectAlarm(stub)).toBe(true);
    const events = await sse.rest();
    expect(events.map((e) => [e.id, e.event, e.data.execution_id])).toEqual([[1, "run.cancelled", "projector"]]);
  });

  it("waits out the grace period for a host-written completion, then writes run.completed with the output", async () => {
    const { jobId, stub } = job();
    await ingest(stub, batch(jobId, "exec-a", 1, [1]));
    const sse = new SseReader(await subscribe(stub, jobId));
    const done = { ...runningFacts, state: "completed" as const, output: "the answer" };
    await answerForPostgres(stub, { ...done, finishedAt: new Date() });
    expect(await runDurableObjectAlarm(stub)).toBe(true);
    expect((await sse.take(1)).map((e) => e.id)).toEqual([1]);
    await expect(sse.next(200)).rejects.toThrow(/timed out/); // the host's own event may still come

    await answerForPostgres(stub, { ...done, finishedAt: new Date(Date.now() - HOST_TERMINAL_GRACE_MS - 1) });
    expect(await runDurableObjectAlarm(stub)).toBe(true);
    const rest = await sse.rest();
    expect(rest.map((e) => [e.event, e.data.payload])).toEqual([
      ["run.completed", { source: "projector", output: "the answer" }],
    ]);
  });

  it("while the log is behind the host's events_through it keeps waiting past the 5 s grace (an outbox backlog), and projects once it caught up", async () => {
    const { jobId, stub } = job();
    await ingest(stub, batch(jobId, "exec-a", 1, [1]));
    const sse = new SseReader(await subscribe(stub, jobId));
    const done = { ...runningFacts, state: "completed" as const, output: "the answer", eventsThrough: 3 };
    const late = new Date(Date.now() - HOST_TERMINAL_GRACE_MS - 1);
    await answerForPostgres(stub, { ...done, finishedAt: late });
    expect(await runDurableObjectAlarm(stub)).toBe(true);
    expect((await sse.take(1)).map((e) => e.id)).toEqual([1]);
    await expect(sse.next(200)).rejects.toThrow(/timed out/); // seqs 2 and 3 are still on their way

    await ingest(stub, batch(jobId, "exec-a", 1, [2, 3]));
    expect((await sse.take(2)).map((e) => e.id)).toEqual([2, 3]);
    await answerForPostgres(stub, { ...done, finishedAt: late });
    expect(await runDurableObjectAlarm(stub)).toBe(true);
    expect((await sse.rest()).map((e) => [e.id, e.event])).toEqual([[4, "run.completed"]]);
  });

  it("a host that died with events undelivered: the stream still ends, after the backlog grace", async () => {
    const { jobId, stub } = job();
    await ingest(stub, batch(jobId, "exec-a", 1, [1]));
    const sse = new SseReader(await subscribe(stub, jobId));
    const done = { ...runningFacts, state: "completed" as const, output: "the answer", eventsThrough: 3 };
    await answerForPostgres(stub, { ...done, finishedAt: new Date(Date.now() - HOST_BACKLOG_GRACE_MS - 1) });
    expect(await runDurableObjectAlarm(stub)).toBe(true);
    expect((await sse.rest()).map((e) => [e.id, e.event])).toEqual([
      [1, "model.delta"],
      [2, "run.completed"],
    ]);
  });

  it("a host terminal event that arrives first wins; the alarm then writes nothing", async () => {
    const { jobId, stub } = job();
    await ingest(stub, batch(jobId, "exec-a", 1, [1]));
    await subscribe(stub, jobId);
    await ingest(stub, { job_id: jobId, events: [envelope(jobId, "exec-a", 1, 2, "run.completed", { output: "x" })] });
    await answerForPostgres(stub, { ...runningFacts, state: "lost", finishedAt: new Date() });
    await runDurableObjectAlarm(stub);
    expect((await offsets(stub)).map((e) => e.type)).toEqual(["model.delta", "run.completed"]);
  });

  it("keeps checking when Postgres does not answer", async () => {
    const { jobId, stub } = job();
    await subscribe(stub, jobId);
    const asked = await answerForPostgres(stub, new Error("connection refused"));
    expect(await runDurableObjectAlarm(stub)).toBe(true);
    expect(await runDurableObjectAlarm(stub)).toBe(true);
    expect(asked).toEqual([jobId, jobId]);
    expect(await offsets(stub)).toEqual([]);
  });

  it("skips the Postgres read while a host is delivering, and asks once the stream goes quiet", async () => {
    const { jobId, stub } = job();
    await subscribe(stub, jobId);
    const asked = await answerForPostgres(stub, runningFacts, { liveHostQuietMs: 60_000 });
    await ingest(stub, batch(jobId, "exec-a", 1, [1]));
    expect(await runDurableObjectAlarm(stub)).toBe(true);
    expect(await runDurableObjectAlarm(stub)).toBe(true);
    expect(asked).toEqual([]); // the host is alive and will send the terminal event itself
    await runInDurableObject(stub, (instance: JobEventsObject) => {
      instance.terminal.liveHostQuietMs = 0; // …time passes without events
    });
    expect(await runDurableObjectAlarm(stub)).toBe(true);
    expect(asked).toEqual([jobId]);
  });
});
