/**
 * The JobEvents object's parts, each alone over a real Durable Object's storage: the tables they
 * own (names and columns existing objects hold), and the rules the object composes — the one
 * alarm at the earliest deadline, the terminal check's cadence, the retention's countdown,
 * ingest trust kept across instances. The object as a whole is driven by the other files here.
 */
import { runInDurableObject } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import type { EventEnvelope } from "../../../../src/contracts/events";
import { batchMac, deriveIngestKey } from "../../../../src/domain/signing";
import {
  type AlarmConcern,
  AlarmScheduler,
  type Deadline,
} from "../../../../workers/durable-objects/job-events/alarm-scheduler";
import { EventLog } from "../../../../workers/durable-objects/job-events/event-log";
import { FirstEventProjection } from "../../../../workers/durable-objects/job-events/first-events";
import { IngestTrust } from "../../../../workers/durable-objects/job-events/ingest-trust";
import { ObjectMeta } from "../../../../workers/durable-objects/job-events/object-meta";
import {
  type JobStateFacts,
  PROJECTED_TERMINAL_SEQ,
} from "../../../../workers/durable-objects/job-events/postgres-facts";
import { Retention } from "../../../../workers/durable-objects/job-events/retention";
import {
  TERMINAL_CHECK,
  TerminalAgreement,
  type Watchers,
} from "../../../../workers/durable-objects/job-events/terminal-agreement";
import { envelope, newJob } from "../../helpers";

const HOUR = 3_600_000;

/** The columns of `table` as SQLite reports them: the storage format existing objects hold. */
function columnsOf(storage: DurableObjectStorage, table: string): string[] {
  return storage.sql
    .exec<{ name: string }>(`SELECT name FROM pragma_table_info('${table}')`)
    .toArray()
    .map((r) => r.name);
}

const fixed = (deadline: Deadline | null): AlarmConcern => ({ nextDeadline: () => deadline });

describe("AlarmScheduler: the one alarm at the earliest deadline", () => {
  it("sets the earliest deadline; keeps a sooner pending alarm for a no-later deadline; an exact one replaces it", async () => {
    const { stub } = newJob();
    await runInDurableObject(stub, async (_i, state) => {
      const storage = state.storage;
      const now = Date.now();
      await new AlarmScheduler(storage, [
        fixed({ at: now + 3 * HOUR, exact: false }),
        fixed(null),
        fixed({ at: now + 2 * HOUR, exact: false }),
      ]).reschedule();
      expect(await storage.getAlarm()).toBe(now + 2 * HOUR);

      // A later no-later deadline leaves the sooner pending alarm (read from storage: a new instance).
      await new AlarmScheduler(storage, [fixed({ at: now + 4 * HOUR, exact: false })]).reschedule();
      expect(await storage.getAlarm()).toBe(now + 2 * HOUR);
      // A sooner one moves it earlier.
      await new AlarmScheduler(storage, [fixed({ at: now + HOUR, exact: false })]).reschedule();
      expect(await storage.getAlarm()).toBe(now + HOUR);

      // Exact: the retention's countdown replaces the sooner terminal check.
      await new AlarmScheduler(storage, [fixed({ at: now + 5 * HOUR, exact: true })]).reschedule();
      expect(await storage.getAlarm()).toBe(now + 5 * HOUR);

      // No deadline at all: the pending alarm is left alone.
      await new AlarmScheduler(storage, [fixed(null)]).reschedule();
      expect(await storage.getAlarm()).toBe(now + 5 * HOUR);

      // From the alarm handler the alarm that fired is no longer pending, whatever was cached.
      const scheduler = new AlarmScheduler(storage, [fixed({ at: now + 6 * HOUR, exact: false })]);
      await scheduler.reschedule();
      expect(await storage.getAlarm()).toBe(now + 5 * HOUR);
      await scheduler.reschedule(true);
      expect(await storage.getAlarm()).toBe(now + 6 * HOUR);
      await storage.deleteAlarm();
    });
  });
});

describe("TerminalAgreement: the terminal check's cadence and the host's terminal event", () => {
  it("checks every second while an SSE client watches, 5 s for chat only, else backs off 10 s → 5 min; none once finished", async () => {
    const { jobId, stub } = newJob();
    await runInDurableObject(stub, (_i, state) => {
      const log = new EventLog(state.storage);
      const watchers: Watchers = { sse: 1, chat: 1 };
      const terminal = new TerminalAgreement(
        log,
        new FirstEventProjection(log, async () => []),
        () => watchers,
        async () => null,
      );
      const delay = (fromAlarm: boolean) => (terminal.nextDeadline(fromAlarm)?.at ?? Number.NaN) - Date.now();
      const near = (ms: number, expected: number) => expect(Math.abs(ms - expected)).toBeLessThan(500);

      near(delay(true), TERMINAL_CHECK.watchedMs);
      watchers.sse = 0;
      near(delay(true), TERMINAL_CHECK.relayedMs);
      watchers.chat = 0;
      // Only the alarm's own rescheduling backs off: a request does not.
      near(delay(false), TERMINAL_CHECK.idleFirstMs);
      near(delay(false), TERMINAL_CHECK.idleFirstMs);
      const seen: number[] = [];
      for (let k = 0; k < 7; k++) seen.push(Math.round(delay(true) / 1000));
      expect(seen).toEqual([10, 20, 40, 80, 160, 300, 300]);
      expect(terminal.nextDeadline(true)?.exact).toBe(false);

      terminal.logFinished();
      near(delay(true), TERMINAL_CHECK.idleFirstMs);
      log.appendProjectedTerminal(envelope(jobId, "projector", 0, PROJECTED_TERMINAL_SEQ, "run.lost", {}));
      expect(terminal.nextDeadline(true)).toBeNull();
    });
  });

  it("refuses a host's terminal event the row does not agree with, and says so when the row cannot be read", async () => {
    const { jobId, stub } = newJob();
    await runInDurableObject(stub, async (_i, state) => {
      const log = new EventLog(state.storage);
      let row: JobStateFacts | Error | null = null;
      const terminal = new TerminalAgreement(
        log,
        new FirstEventProjection(log, async () => []),
        () => ({ sse: 0, chat: 0 }),
        async () => {
          if (row instanceof Error) throw row;
          return row;
        },
      );
      const done = envelope(jobId, "exec-a", 1, 3, "run.completed", { output: "answer" });
      expect(await terminal.hostTerminal(jobId, done)).toMatchObject({ reason: "terminal_disagrees" });
      row = {
        state: "completed",
        executionId: "exec-a",
        epoch: 1,
        output: "answer",
        error: null,
        finishedAt: new Date(),
        startedAt: new Date(),
      };
      expect(await terminal.hostTerminal(jobId, done)).toBeNull();
      row = new Error("postgres down");
      expect(await terminal.hostTerminal(jobId, done)).toMatchObject({ reason: "unavailable" });

      // The alarm's check: a live host skips the read; an unknown job is said so.
      terminal.liveHostQuietMs = HOUR;
      terminal.hostDelivered();
      expect(await terminal.checkRow(jobId)).toEqual({ kind: "pending" });
      terminal.liveHostQuietMs = 0;
      row = null;
      expect(await terminal.checkRow(jobId)).toEqual({ kind: "no_job" });
      expect(log.lastOffset).toBe(0);
    });
  });
});

describe("Retention: the countdown in meta, then deleteAll", () => {
  it("has no deadline until the log is finished; then its stored due time, exactly; deletes once due", async () => {
    const { jobId, stub } = newJob();
    await runInDurableObject(stub, async (_i, state) => {
      const storage = state.storage;
      const log = new EventLog(storage);
      const meta = new ObjectMeta(storage);
      const retention = new Retention(storage, meta, log, HOUR);
      retention.arm();
      expect(retention.nextDeadline()).toBeNull(); // the log is not finished

      log.appendProjectedTerminal(envelope(jobId, "projector", 0, PROJECTED_TERMINAL_SEQ, "run.lost", {}));
      const before = Date.now();
      retention.arm();
      const deadline = retention.nextDeadline();
      expect(deadline?.exact).toBe(true);
      expect(deadline?.at).toBeGreaterThanOrEqual(before + HOUR);
      expect(deadline?.at).toBeLessThanOrEqual(Date.now() + HOUR);
      // Stored as `meta.expires_at`, text, where objects finished before this code keep it too.
      const stored = storage.sql.exec<{ value: string }>("SELECT value FROM meta WHERE key = 'expires_at'").one();
      expect(stored.value).toBe(String(deadline?.at));

      expect(await retention.expireIfDue()).toBe(false);
      expect(retention.expired).toBe(false);

      // A finished log with no stored due time (finished before retention existed) is armed, not deleted.
      storage.sql.exec("DELETE FROM meta WHERE key = 'expires_at'");
      expect(await retention.expireIfDue()).toBe(false);
      expect(meta.expiresAt()).not.toBeNull();

      meta.setExpiresAt(Date.now() - 1);
      await storage.setAlarm(Date.now() + HOUR);
      expect(await retention.expireIfDue()).toBe(true);
      expect(retention.expired).toBe(true);
      expect(retention.nextDeadline()).toBeNull();
      expect(await storage.getAlarm()).toBeNull();
      expect(
        storage.sql.exec("SELECT name FROM sqlite_master WHERE type = 'table' AND name = 'events'").toArray(),
      ).toEqual([]);
    });
  });
});

describe("ObjectMeta: the meta table", () => {
  it("keeps the first job id it is told, across instances, in meta(key, value)", async () => {
    const { stub } = newJob();
    await runInDurableObject(stub, (_i, state) => {
      const storage = state.storage;
      const meta = new ObjectMeta(storage);
      expect(columnsOf(storage, "meta")).toEqual(["key", "value"]);
      expect(meta.jobId()).toBeNull();
      meta.rememberJobId("job-1");
      meta.rememberJobId("job-2");
      expect(meta.jobId()).toBe("job-1");

      const fresh = new ObjectMeta(storage);
      expect(fresh.knownJobId).toBeNull(); // not read yet: knownJobId never reads storage
      expect(fresh.jobId()).toBe("job-1");
      expect(fresh.knownJobId).toBe("job-1");
      expect(storage.sql.exec("SELECT key, value FROM meta").toArray()).toEqual([{ key: "job_id", value: "job-1" }]);
    });
  });
});

describe("IngestTrust: the trusted_generations table", () => {
  it("reads Postgres once per generation, keeps the verified key across instances, writes nothing for a refused batch", async () => {
    const { jobId, stub } = newJob();
    const executionId = crypto.randomUUID();
    const token = crypto.randomUUID();
    const events: EventEnvelope[] = [envelope(jobId, executionId, 2, 1)];
    const json = JSON.stringify(events);
    const signed = async (nonce: string, t = token) => ({
      job_id: jobId,
      events,
      mac: await batchMac(await deriveIngestKey(t, executionId), nonce, jobId, json),
    });
    await runInDurableObject(stub, async (_i, state) => {
      const storage = state.storage;
      let reads = 0;
      let epoch = 2;
      const lookup = async (j: string, e: string) => {
        reads++;
        if (epoch < 0) throw new Error("postgres down");
        return j === jobId && e === executionId ? { epoch, token } : null;
      };
      const trust = new IngestTrust(storage, lookup);
      expect(columnsOf(storage, "trusted_generations")).toEqual(["execution_id", "epoch", "ingest_key"]);
      const rows = () => storage.sql.exec("SELECT execution_id, epoch FROM trusted_generations").toArray();

      expect(await trust.verify(await signed("n1", crypto.randomUUID()), "n1", json)).toMatchObject({
        reason: "bad_mac",
      });
      epoch = 3;
      expect(await trust.verify(await signed("n2"), "n2", json)).toMatchObject({ reason: "wrong_epoch" });
      epoch = -1;
      expect(await trust.verify(await signed("n3"), "n3", json)).toMatchObject({ reason: "unavailable" });
      expect(rows()).toEqual([]);

      epoch = 2;
      expect(await trust.verify(await signed("n4"), "n4", json)).toBeNull();
      expect(rows()).toEqual([{ execution_id: executionId, epoch: 2 }]);
      const readsSoFar = reads;
      expect(await trust.verify(await signed("n5"), "n5", json)).toBeNull();
      // A new instance (after an eviction) trusts the stored generation without asking Postgres.
      expect(await new IngestTrust(storage, lookup).verify(await signed("n6"), "n6", json)).toBeNull();
      expect(reads).toBe(readsSoFar);
    });
  });
});
