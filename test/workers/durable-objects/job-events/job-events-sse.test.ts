/** JobEventsObject event stream: replay from a cursor, then live, no dup/gap, close at terminal. */
import { describe, expect, it } from "vitest";
import { SSE_FINISHED_STATUS, SSE_RETRY_MS } from "../../../../src/contracts/sse";
import { batch, envelope, ingest, newJob, SseReader } from "../../helpers";

function subscribe(stub: ReturnType<typeof newJob>["stub"], after?: number): Promise<Response> {
  return stub.fetch(`https://job-events/events${after === undefined ? "" : `?after=${after}`}`);
}

describe("JobEventsObject SSE", () => {
  it("replays exactly the tail after the cursor, framed as id/event/data", async () => {
    const { jobId, stub } = newJob();
    await ingest(stub, batch(jobId, "exec-a", 1, [1, 2, 3, 4, 5]));
    const res = await subscribe(stub, 2);
    expect(res.headers.get("content-type")).toBe("text/event-stream");
    expect(res.headers.get("cache-control")).toBe("no-cache");
    const sse = new SseReader(res);
    const events = await sse.take(3);
    expect(events.map((e) => e.id)).toEqual([3, 4, 5]);
    expect(events[0]).toMatchObject({ event: "model.delta", data: { job_id: jobId, seq: 3, payload: { text: "t3" } } });
    await sse.cancel();
    const last = new SseReader(await subscribe(stub, 4));
    expect((await last.take(1)).map((e) => e.id)).toEqual([5]);
    await last.cancel();
  });

  it("a live subscriber gets replay then live events with no duplicate or gap, and the stream closes at the terminal event", async () => {
    const { jobId, stub } = newJob();
    await ingest(stub, batch(jobId, "exec-a", 1, [1, 2]));
    const sse = new SseReader(await subscribe(stub, 0));
    expect((await sse.take(2)).map((e) => e.id)).toEqual([1, 2]);

    await ingest(stub, batch(jobId, "exec-a", 1, [2, 3])); // seq 2 is a duplicate
    // A gap: the terminal event (seq 5) arrives before seq 4 and is held, not streamed.
    await ingest(stub, { job_id: jobId, events: [envelope(jobId, "exec-a", 1, 5, "run.completed", { output: "x" })] });
    await ingest(stub, batch(jobId, "exec-a", 1, [4]));

    const rest = await sse.rest(); // resolves only if the DO closes the stream
    expect(rest.map((e) => [e.id, e.data.seq, e.event])).toEqual([
      [3, 3, "model.delta"],
      [4, 4, "model.delta"],
      [5, 5, "run.completed"],
    ]);
  });

  it("events ingested between subscribing and reading are neither lost nor repeated", async () => {
    const { jobId, stub } = newJob();
    await ingest(stub, batch(jobId, "exec-a", 1, [1, 2, 3]));
    const res = await subscribe(stub, 1);
    // Nothing read yet: the replay (2, 3) is queued; these arrive live.
    await ingest(stub, batch(jobId, "exec-a", 1, [4, 5]));
    await ingest(stub, { job_id: jobId, events: [envelope(jobId, "exec-a", 1, 6, "run.cancelled")] });
    const ids = (await new SseReader(res).rest()).map((e) => e.id);
    expect(ids).toEqual([2, 3, 4, 5, 6]);
  });

  it("closes immediately after the replay when the log already has its terminal event", async () => {
    const { jobId, stub } = newJob();
    await ingest(stub, {
      job_id: jobId,
      events: [envelope(jobId, "exec-a", 1, 1), envelope(jobId, "exec-a", 1, 2, "run.timed_out")],
    });
    expect((await new SseReader(await subscribe(stub, 0)).rest()).map((e) => e.id)).toEqual([1, 2]);
    expect((await new SseReader(await subscribe(stub, 1)).rest()).map((e) => e.id)).toEqual([2]);
  });

  it("a finished log with nothing after the cursor answers 204 and no body, so an EventSource stops reconnecting", async () => {
    const { jobId, stub } = newJob();
    await ingest(stub, {
      job_id: jobId,
      events: [envelope(jobId, "exec-a", 1, 1), envelope(jobId, "exec-a", 1, 2, "run.completed", { output: "x" })],
    });
    for (const after of [2, 3, 1_000]) {
      const res = await subscribe(stub, after);
      expect(res.status, `after=${after}`).toBe(SSE_FINISHED_STATUS);
      expect(await res.text()).toBe("");
    }
    // Not finished: nothing after the cursor is a stream that stays open for what comes.
    const { jobId: liveId, stub: live } = newJob();
    await ingest(live, batch(liveId, "exec-a", 1, [1]));
    const open = await subscribe(live, 1);
    expect(open.status).toBe(200);
    await open.body?.cancel();
  });

  it("opens every stream with retry:, so the reconnect timing is ours, not the browser's default", async () => {
    const { jobId, stub } = newJob();
    const idle = await subscribe(stub, 0);
    const reader = idle.body?.getReader();
    const first = new TextDecoder().decode((await reader?.read())?.value);
    expect(first.startsWith(`retry: ${SSE_RETRY_MS}\n\n`)).toBe(true);
    await reader?.cancel();
    await ingest(stub, { job_id: jobId, events: [envelope(jobId, "exec-a", 1, 1, "run.completed", { output: "x" })] });
    const replay = new SseReader(await subscribe(stub, 0));
    expect((await replay.rest()).map((e) => e.id)).toEqual([1]);
    expect(replay.retryMs).toBe(SSE_RETRY_MS);
  });

  it("fans out to every subscriber; one that never reads does not hold up the others", async () => {
    const { jobId, stub } = newJob();
    const stalled = await subscribe(stub, 0); // never read
    const a = new SseReader(await subscribe(stub, 0));
    const b = new SseReader(await subscribe(stub, 0));
    for (let seq = 1; seq <= 20; seq++) await ingest(stub, batch(jobId, "exec-a", 1, [seq]));
    await ingest(stub, { job_id: jobId, events: [envelope(jobId, "exec-a", 1, 21, "run.completed")] });
    const expected = Array.from({ length: 21 }, (_, i) => i + 1);
    expect((await a.rest()).map((e) => e.id)).toEqual(expected);
    expect((await b.rest()).map((e) => e.id)).toEqual(expected);
    await stalled.body?.cancel();
  });

  it("a subscriber that falls behind gets its backlog in a few writes, in order, nothing lost or repeated", async () => {
    const { jobId, stub } = newJob();
    const res = await subscribe(stub, 0);
    // Not read while 40 publishes happen: each was one write per subscriber, so the reader then
    // needed 40 reads (and the runtime 40 pump steps and socket writes) to catch up.
    for (let seq = 1; seq <= 40; seq++) await ingest(stub, batch(jobId, "exec-a", 1, [seq]));
    await ingest(stub, { job_id: jobId, events: [envelope(jobId, "exec-a", 1, 41, "run.completed")] });
    const reader = (res.body as ReadableStream<Uint8Array>).getReader();
    const decoder = new TextDecoder();
    let text = "";
    let reads = 0;
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      reads++;
      text += decoder.decode(value, { stream: true });
    }
    const ids = [...text.matchAll(/^id: (\d+)$/gm)].map((m) => Number(m[1]));
    expect(ids).toEqual(Array.from({ length: 41 }, (_, i) => i + 1));
    expect(reads).toBeLessThanOrEqual(4);
  });

  it("subscribers at different cursors, reading at different paces, each get exactly the events after their own cursor", async () => {
    const { jobId, stub } = newJob();
    await ingest(stub, batch(jobId, "exec-a", 1, [1, 2, 3, 4, 5, 6, 7, 8]));
    const cursors = [0, 3, 8];
    const fast = await Promise.all(cursors.map(async (c) => new SseReader(await subscribe(stub, c))));
    const slow = await Promise.all(cursors.map((c) => subscribe(stub, c))); // read only at the end
    const fastIds: number[][] = cursors.map(() => []);
    for (let seq = 9; seq <= 30; seq += 2) {
      await ingest(stub, batch(jobId, "exec-a", 1, [seq, seq + 1]));
      // The fast readers keep up as it streams; the slow ones build a backlog.
      for (const [i, r] of fast.entries()) {
        const ids = fastIds[i] as number[];
        const want = seq + 1 - (cursors[i] as number);
        while (ids.length < want) ids.push(((await r.next()) as { id: number }).id);
      }
    }
    await ingest(stub, { job_id: jobId, events: [envelope(jobId, "exec-a", 1, 31, "run.completed")] });
    const upTo31 = (c: number) => Array.from({ length: 31 - c }, (_, i) => c + i + 1);
    for (const [i, r] of fast.entries()) {
      expect([...(fastIds[i] as number[]), ...(await r.rest()).map((e) => e.id)]).toEqual(upTo31(cursors[i] as number));
    }
    for (const [i, res] of slow.entries()) {
      expect((await new SseReader(res).rest()).map((e) => e.id)).toEqual(upTo31(cursors[i] as number));
    }
  });

  it("cuts off a subscriber more than 256 publishes behind; the others get everything", async () => {
    const { jobId, stub } = newJob();
    const stalled = await subscribe(stub, 0); // never read until the end
    const live = new SseReader(await subscribe(stub, 0));
    const got: number[] = [];
    for (let seq = 1; seq <= 300; seq++) {
      await ingest(stub, batch(jobId, "exec-a", 1, [seq]));
      got.push(((await live.next()) as { id: number }).id);
    }
    await ingest(stub, { job_id: jobId, events: [envelope(jobId, "exec-a", 1, 301, "run.completed")] });
    expect([...got, ...(await live.rest()).map((e) => e.id)]).toEqual(Array.from({ length: 301 }, (_, i) => i + 1));
    // The stalled stream was aborted: reading it ends in an error before the terminal event.
    const reader = (stalled.body as ReadableStream<Uint8Array>).getReader();
    const decoder = new TextDecoder();
    let text = "";
    let failed = false;
    try {
      for (;;) {
        const { done, value } = await reader.read();
        if (done) break;
        text += decoder.decode(value, { stream: true });
      }
    } catch {
      failed = true;
    }
    expect(failed).toBe(true);
    expect(text).not.toContain("run.completed");
  });

  it("sends a keepalive comment while a subscriber is idle", async () => {
    const { stub } = newJob();
    const sse = new SseReader(await subscribe(stub, 0));
    // SSE_HEARTBEAT_MS is 200 in the test config; nothing is ingested, so only comments arrive.
    await expect(sse.next(700)).rejects.toThrow(/timed out/);
    expect(sse.comments).toBeGreaterThanOrEqual(2);
    await sse.cancel();
  });

  it("refuses a malformed cursor", async () => {
    const { stub } = newJob();
    expect((await stub.fetch("https://job-events/events?after=-1")).status).toBe(400);
  });
});
