/**
 * Retention of a finished job's event log: the one alarm, re-armed at the terminal event for
 * terminal time + the retention, deletes all of the object's storage; the object then answers
 * 410 instead of replaying an empty log as if the job had had no events.
 */
import { runDurableObjectAlarm, runInDurableObject } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import type { JobEventsObject } from "../../../../workers/durable-objects/job-events/job-events-object";
import { batch, envelope, ingest, newJob, SseReader } from "../../helpers";

const RETENTION_MS = 60_000;

/** The object's SQLite size, its alarm, and its table names. */
function storageOf(stub: DurableObjectStub<JobEventsObject>) {
  return runInDurableObject(stub, async (_i, state) => ({
    bytes: state.storage.sql.databaseSize,
    alarm: await state.storage.getAlarm(),
    tables: state.storage.sql
      .exec<{ name: string }>(
        "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE '\\_%' ESCAPE '\\'",
      )
      .toArray()
      .map((r) => r.name),
  }));
}

/** A typical job: 100 model deltas, then its terminal event. */
async function finishedJob(retentionMs = RETENTION_MS) {
  const { jobId, stub } = newJob();
  await runInDurableObject(stub, (i: JobEventsObject) => {
    i.retention.retentionMs = retentionMs;
  });
  for (let from = 1; from <= 100; from += 10) {
    const seqs = Array.from({ length: 10 }, (_, k) => from + k);
    expect((await ingest(stub, batch(jobId, "exec-a", 1, seqs))).ok).toBe(true);
  }
  const done = await ingest(stub, {
    job_id: jobId,
    events: [envelope(jobId, "exec-a", 1, 101, "run.completed", { output: "answer" })],
  });
  expect(done.ok).toBe(true);
  return { jobId, stub };
}

describe("JobEventsObject retention", () => {
  it("arms its alarm at terminal time + the retention, and on it deletes all its storage; then answers 410", async () => {
    const before = Date.now();
    const { stub } = await finishedJob();
    const full = await storageOf(stub);
    expect(full.tables).toContain("events");
    expect(full.alarm).not.toBeNull();
    expect(full.alarm as number).toBeGreaterThanOrEqual(before + RETENTION_MS);
    expect(full.alarm as number).toBeLessThanOrEqual(Date.now() + RETENTION_MS);
    console.log(`retention: a 100-delta job's DO SQLite is ${full.bytes} bytes before deleteAll`);

    // Not due yet: the alarm handler runs early (what a terminal-check alarm already in flight
    // at the terminal event does) and must keep the log, re-arming for the retention. A far
    // alarm is set so workerd does not run it on its own; runDurableObjectAlarm runs it now.
    await runInDurableObject(stub, async (_i, state) => {
      await state.storage.setAlarm(Date.now() + 3_600_000);
    });
    expect(await runDurableObjectAlarm(stub)).toBe(true);
    const kept = await storageOf(stub);
    expect(kept.tables).toContain("events");
    expect(kept.alarm).toBe(full.alarm);

    // Due: the log, meta and trust tables all go.
    await runInDurableObject(stub, (_i, state) => {
      state.storage.sql.exec("UPDATE meta SET value = ? WHERE key = 'expires_at'", String(Date.now() - 1));
    });
    expect(await runDurableObjectAlarm(stub)).toBe(true);
    const gone = await storageOf(stub);
    console.log(`retention: after deleteAll the DO SQLite is ${gone.bytes} bytes`);
    expect(gone.tables).toEqual([]);
    expect(gone.alarm).toBeNull();
    expect(gone.bytes).toBeLessThan(full.bytes);

    const res = await stub.fetch("https://job-events/events?after=0");
    expect(res.status).toBe(410);
    expect(((await res.json()) as { error: { code: string } }).error.code).toBe("events_expired");
    // Nothing it was asked recreated a table.
    expect((await storageOf(stub)).tables).toEqual([]);
  });

  it("until the retention is due, a finished log still replays in full", async () => {
    const { stub } = await finishedJob(3_600_000);
    const events = await new SseReader(await stub.fetch("https://job-events/events?after=0")).rest();
    expect(events).toHaveLength(101);
    expect(events.at(-1)?.event).toBe("run.completed");
  });
});
