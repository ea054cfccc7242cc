/** JobEventsObject ingest rules: ordering, dedupe, epoch fencing, one terminal event, nonces. */
import { runInDurableObject } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import { EventLog, NONCE_RETENTION_MS } from "../../../../workers/durable-objects/job-events/event-log";
import { batch, envelope, ingest, newJob, offsets } from "../../helpers";

describe("JobEventsObject ingest", () => {
  it("assigns offsets contiguous from 1 across batches", async () => {
    const { jobId, stub } = newJob();
    expect(await ingest(stub, batch(jobId, "exec-a", 1, [1, 2, 3]))).toEqual({
      ok: true,
      ack: { acked_seq: 3, accepted: 3, duplicates: 0, buffered: 0, deferred: 0 },
    });
    expect(await ingest(stub, batch(jobId, "exec-a", 1, [4, 5]))).toMatchObject({ ok: true, ack: { acked_seq: 5 } });
    const log = await offsets(stub);
    expect(log.map((e) => e.offset)).toEqual([1, 2, 3, 4, 5]);
    expect(log.map((e) => e.seq)).toEqual([1, 2, 3, 4, 5]);
  });

  it("drops and counts duplicate seqs, within and across batches", async () => {
    const { jobId, stub } = newJob();
    await ingest(stub, batch(jobId, "exec-a", 1, [1, 2]));
    expect(await ingest(stub, batch(jobId, "exec-a", 1, [1, 2, 3, 3]))).toEqual({
      ok: true,
      ack: { acked_seq: 3, accepted: 1, duplicates: 3, buffered: 0, deferred: 0 },
    });
    expect((await offsets(stub)).map((e) => e.seq)).toEqual([1, 2, 3]);
  });

  it("buffers events past a gap without acking them; the late seq releases the run in order", async () => {
    const { jobId, stub } = newJob();
    await ingest(stub, batch(jobId, "exec-a", 1, [1]));
    expect(await ingest(stub, batch(jobId, "exec-a", 1, [3, 4]))).toEqual({
      ok: true,
      ack: { acked_seq: 1, accepted: 0, duplicates: 0, buffered: 2, deferred: 0 },
    });
    expect(await offsets(stub)).toHaveLength(1);
    // Only seq 2 arrives late: 3 and 4 come out of the buffer behind it.
    expect(await ingest(stub, batch(jobId, "exec-a", 1, [2]))).toEqual({
      ok: true,
      ack: { acked_seq: 4, accepted: 3, duplicates: 0, buffered: 0, deferred: 0 },
    });
    const log = await offsets(stub);
    expect(log.map((e) => [e.offset, e.seq])).toEqual([
      [1, 1],
      [2, 2],
      [3, 3],
      [4, 4],
    ]);
  });

  it("a host resending from acked_seq + 1 over a buffered tail gets each event once", async () => {
    const { jobId, stub } = newJob();
    await ingest(stub, batch(jobId, "exec-a", 1, [1]));
    await ingest(stub, batch(jobId, "exec-a", 1, [3, 4]));
    expect(await ingest(stub, batch(jobId, "exec-a", 1, [2, 3, 4, 5]))).toMatchObject({
      ok: true,
      ack: { acked_seq: 5, accepted: 4, buffered: 0 },
    });
    expect((await offsets(stub)).map((e) => e.seq)).toEqual([1, 2, 3, 4, 5]);
  });

  it("a first batch that does not start at seq 1 appends nothing and is held for seq 1", async () => {
    const { jobId, stub } = newJob();
    expect(await ingest(stub, batch(jobId, "exec-a", 1, [2]))).toMatchObject({
      ok: true,
      ack: { acked_seq: 0, buffered: 1 },
    });
    expect(await offsets(stub)).toEqual([]);
    expect(await ingest(stub, batch(jobId, "exec-a", 1, [1]))).toMatchObject({ ok: true, ack: { acked_seq: 2 } });
    expect((await offsets(stub)).map((e) => e.seq)).toEqual([1, 2]);
  });

  it("rejects a stale epoch and writes nothing", async () => {
    const { jobId, stub } = newJob();
    await ingest(stub, batch(jobId, "exec-b", 2, [1]));
    const stale = await ingest(stub, batch(jobId, "exec-a", 1, [1, 2]));
    expect(stale).toMatchObject({ ok: false, reason: "stale_epoch" });
    expect((await offsets(stub)).map((e) => e.execution_id)).toEqual(["exec-b"]);
  });

  it("a newer epoch retires the older generation", async () => {
    const { jobId, stub } = newJob();
    await ingest(stub, batch(jobId, "exec-a", 1, [1, 2]));
    expect(await ingest(stub, batch(jobId, "exec-b", 2, [1]))).toMatchObject({ ok: true, ack: { acked_seq: 1 } });
    expect(await ingest(stub, batch(jobId, "exec-a", 1, [3]))).toMatchObject({ ok: false, reason: "stale_epoch" });
    // Another execution claiming an epoch that is already held is refused too.
    expect(await ingest(stub, batch(jobId, "exec-c", 2, [1]))).toMatchObject({ ok: false, reason: "epoch_taken" });
    expect((await offsets(stub)).map((e) => [e.offset, e.execution_id, e.seq])).toEqual([
      [1, "exec-a", 1],
      [2, "exec-a", 2],
      [3, "exec-b", 1],
    ]);
  });

  it("stores exactly one terminal event per job", async () => {
    const { jobId, stub } = newJob();
    const withTerminal = {
      job_id: jobId,
      events: [
        envelope(jobId, "exec-a", 1, 1, "run.started"),
        envelope(jobId, "exec-a", 1, 2, "run.completed", { output: "done" }),
        envelope(jobId, "exec-a", 1, 3, "model.delta"),
      ],
    };
    // Events behind the terminal one in the same batch are not appended or acked.
    expect(await ingest(stub, withTerminal)).toEqual({
      ok: true,
      ack: { acked_seq: 2, accepted: 2, duplicates: 0, buffered: 0, deferred: 0 },
    });
    // A resend of the terminal event is a duplicate; anything new is refused.
    expect(await ingest(stub, batch(jobId, "exec-a", 1, [2]))).toMatchObject({ ok: true, ack: { duplicates: 1 } });
    expect(await ingest(stub, batch(jobId, "exec-a", 1, [3]))).toMatchObject({ ok: false, reason: "job_finished" });
    const lost = { job_id: jobId, events: [envelope(jobId, "exec-b", 2, 1, "run.lost")] };
    expect(await ingest(stub, lost)).toMatchObject({ ok: false, reason: "job_finished" });
    expect((await offsets(stub)).map((e) => e.type)).toEqual(["run.started", "run.completed"]);
  });

  it("rejects a batch mixing executions", async () => {
    const { jobId, stub } = newJob();
    const mixed = { job_id: jobId, events: [envelope(jobId, "exec-a", 1, 1), envelope(jobId, "exec-b", 1, 2)] };
    expect(await ingest(stub, mixed)).toMatchObject({ ok: false, reason: "invalid_batch" });
    expect(await offsets(stub)).toEqual([]);
  });

  it("rejects a repeated nonce and writes nothing", async () => {
    const { jobId, stub } = newJob();
    const nonce = crypto.randomUUID();
    expect(await ingest(stub, batch(jobId, "exec-a", 1, [1]), nonce)).toMatchObject({ ok: true });
    expect(await ingest(stub, batch(jobId, "exec-a", 1, [2]), nonce)).toMatchObject({
      ok: false,
      reason: "replayed_nonce",
    });
    expect((await offsets(stub)).map((e) => e.seq)).toEqual([1]);
  });

  it("remembers nonces for the whole freshness window, then forgets them", async () => {
    const { jobId, stub } = newJob();
    await runInDurableObject(stub, (_instance, state) => {
      const log = new EventLog(state.storage);
      const t0 = 1_700_000_000_000;
      expect(log.ingest(jobId, batch(jobId, "exec-a", 1, [1]).events, "n1", t0).ok).toBe(true);
      const withinWindow = log.ingest(jobId, batch(jobId, "exec-a", 1, [2]).events, "n1", t0 + 120_000);
      expect(withinWindow).toMatchObject({ ok: false, reason: "replayed_nonce" });
      const afterRetention = log.ingest(
        jobId,
        batch(jobId, "exec-a", 1, [2]).events,
        "n1",
        t0 + NONCE_RETENTION_MS + 1,
      );
      expect(afterRetention).toMatchObject({ ok: true, ack: { acked_seq: 2 } });
    });
  });

  it("keeps the log across a restart of the object", async () => {
    const { jobId, stub } = newJob();
    await ingest(stub, {
      job_id: jobId,
      events: [envelope(jobId, "exec-a", 1, 1), envelope(jobId, "exec-a", 1, 2, "run.failed", { error: {} })],
    });
    // A fresh EventLog over the same storage must see the stored terminal event.
    await runInDurableObject(stub, (_instance, state) => {
      const log = new EventLog(state.storage);
      expect(log.finished).toBe(true);
      expect(log.readAfter(0).map((e) => e.offset)).toEqual([1, 2]);
    });
  });
});
