/**
 * The durable half of the projector: one job's ordered event log in the Durable Object's SQLite.
 *
 * Hosts deliver at least once, in batches of one execution. Events are accepted by
 * (execution_id, seq): a seq already held is a duplicate (dropped, counted); only the next
 * contiguous seq is appended, so a batch after a gap appends nothing past it and the host resends
 * from `acked_seq + 1` (buffering out-of-order events is a later step). The generation with the
 * highest epoch is the only one that may write: a newer epoch retires the older one, a stale one
 * is refused. Each appended event gets the next per-job offset from 1, the id clients resume by.
 * A job has exactly one terminal event; nothing is appended after it.
 *
 * Every ingest runs in one SQLite transaction, together with the nonce that makes a replayed
 * signed request a no-op, so a request is either wholly applied or not at all.
 */

import { type EventEnvelope, type IngestAck, isTerminalEventType, TERMINAL_EVENT_TYPES } from "../../src/contracts";
import { SIGNATURE_MAX_SKEW_MS } from "../../src/domain/signing";

/** A nonce is accepted while its timestamp is within ±60 s of now, i.e. up to ~120 s after it
 * arrives; remembering it for 180 s covers that window with margin for clock skew. */
export const NONCE_RETENTION_MS = 3 * SIGNATURE_MAX_SKEW_MS;

/** An event as the log keeps it: `body` is the envelope JSON, sent to clients verbatim. */
export interface LoggedEvent {
  offset: number;
  type: string;
  body: string;
}

export type IngestRejection = "replayed_nonce" | "stale_epoch" | "epoch_taken" | "job_finished" | "invalid_batch";

export type IngestOutcome =
  | { ok: true; ack: IngestAck; appended: LoggedEvent[]; finished: boolean }
  | { ok: false; reason: IngestRejection; message: string };

/** A batch must be events of one job, one execution, one epoch. Returns why not, or null. */
export function batchShapeError(jobId: string, events: readonly EventEnvelope[]): string | null {
  const first = events[0];
  if (!first) return "events must not be empty";
  for (const e of events) {
    if (e.job_id !== jobId) return `event seq ${e.seq} has job_id ${e.job_id}, not the batch's ${jobId}`;
    if (e.execution_id !== first.execution_id || e.epoch !== first.epoch) {
      return "all events of a batch must belong to one execution and epoch";
    }
  }
  return null;
}

const SCHEMA = `
  CREATE TABLE IF NOT EXISTS events (
    "offset" INTEGER PRIMARY KEY,
    execution_id TEXT NOT NULL,
    epoch INTEGER NOT NULL,
    seq INTEGER NOT NULL,
    type TEXT NOT NULL,
    body TEXT NOT NULL,
    UNIQUE (execution_id, seq)
  );
  CREATE TABLE IF NOT EXISTS generations (
    execution_id TEXT PRIMARY KEY,
    epoch INTEGER NOT NULL,
    last_seq INTEGER NOT NULL
  );
  CREATE TABLE IF NOT EXISTS nonces (nonce TEXT PRIMARY KEY, ts INTEGER NOT NULL);
  CREATE INDEX IF NOT EXISTS nonces_by_ts ON nonces (ts);
`;

type Generation = {
  execution_id: string;
  epoch: number;
  last_seq: number;
};

export class EventLog {
  /** Offset of the terminal event once stored; cached because every ingest asks. */
  private terminalOffset: number | null;

  constructor(private readonly storage: DurableObjectStorage) {
    storage.sql.exec(SCHEMA);
    const placeholders = TERMINAL_EVENT_TYPES.map(() => "?").join(", ");
    const row = storage.sql
      .exec<{ offset: number }>(
        `SELECT "offset" FROM events WHERE type IN (${placeholders}) LIMIT 1`,
        ...TERMINAL_EVENT_TYPES,
      )
      .toArray()[0];
    this.terminalOffset = row?.offset ?? null;
  }

  get finished(): boolean {
    return this.terminalOffset !== null;
  }

  /** Events with offset > `after`, in offset order. */
  readAfter(after: number): LoggedEvent[] {
    return this.storage.sql
      .exec<{ offset: number; type: string; body: string }>(
        `SELECT "offset", type, body FROM events WHERE "offset" > ? ORDER BY "offset"`,
        after,
      )
      .toArray()
      .map((r) => ({ offset: r.offset, type: r.type, body: r.body }));
  }

  ingest(jobId: string, events: readonly EventEnvelope[], nonce: string, now = Date.now()): IngestOutcome {
    const shapeError = batchShapeError(jobId, events);
    if (shapeError) return { ok: false, reason: "invalid_batch", message: shapeError };
    const outcome = this.storage.transactionSync(() => this.ingestInTransaction(events, nonce, now));
    // Only after the commit: a thrown transaction must not leave the cache claiming a terminal.
    if (outcome.ok && outcome.finished && this.terminalOffset === null) {
      this.terminalOffset = outcome.appended.find((e) => isTerminalEventType(e.type))?.offset ?? null;
    }
    return outcome;
  }

  private ingestInTransaction(events: readonly EventEnvelope[], nonce: string, now: number): IngestOutcome {
    const sql = this.storage.sql;
    sql.exec("DELETE FROM nonces WHERE ts < ?", now - NONCE_RETENTION_MS);
    if (sql.exec("SELECT 1 FROM nonces WHERE nonce = ?", nonce).toArray().length > 0) {
      return { ok: false, reason: "replayed_nonce", message: "this signed request was already received" };
    }
    sql.exec("INSERT INTO nonces (nonce, ts) VALUES (?, ?)", nonce, now);

    const { execution_id: executionId, epoch } = events[0] as EventEnvelope;
    const current = sql
      .exec<Generation>("SELECT execution_id, epoch, last_seq FROM generations ORDER BY epoch DESC LIMIT 1")
      .toArray()[0];
    let generation = sql
      .exec<Generation>("SELECT execution_id, epoch, last_seq FROM generations WHERE execution_id = ?", executionId)
      .toArray()[0];

    if (current && epoch < current.epoch) {
      return {
        ok: false,
        reason: "stale_epoch",
        message: `epoch ${epoch} is stale: execution ${current.execution_id} holds epoch ${current.epoch}`,
      };
    }
    if (generation && generation.epoch !== epoch) {
      return {
        ok: false,
        reason: "stale_epoch",
        message: `execution ${executionId} started at epoch ${generation.epoch}, not ${epoch}`,
      };
    }
    if (!generation) {
      if (current && current.epoch === epoch) {
        return {
          ok: false,
          reason: "epoch_taken",
          message: `epoch ${epoch} already belongs to execution ${current.execution_id}`,
        };
      }
      if (this.terminalOffset !== null) {
        return { ok: false, reason: "job_finished", message: "the job already has its terminal event" };
      }
      generation = { execution_id: executionId, epoch, last_seq: 0 };
      sql.exec("INSERT INTO generations (execution_id, epoch, last_seq) VALUES (?, ?, 0)", executionId, epoch);
    }

    let lastSeq = generation.last_seq;
    let nextOffset = sql.exec<{ n: number }>(`SELECT coalesce(max("offset"), 0) + 1 AS n FROM events`).one().n;
    let finished = this.terminalOffset !== null;
    const alreadyFinished = finished;
    let duplicates = 0;
    let refusedAfterTerminal = false;
    const appended: LoggedEvent[] = [];

    for (const event of [...events].sort((a, b) => a.seq - b.seq)) {
      if (event.seq <= lastSeq) {
        duplicates++;
        continue;
      }
      if (finished) {
        refusedAfterTerminal = true;
        break;
      }
      if (event.seq !== lastSeq + 1) break; // a gap: the host resends from acked_seq + 1
      const logged: LoggedEvent = { offset: nextOffset++, type: event.type, body: JSON.stringify(event) };
      sql.exec(
        `INSERT INTO events ("offset", execution_id, epoch, seq, type, body) VALUES (?, ?, ?, ?, ?, ?)`,
        logged.offset,
        executionId,
        epoch,
        event.seq,
        event.type,
        logged.body,
      );
      appended.push(logged);
      lastSeq = event.seq;
      if (isTerminalEventType(event.type)) finished = true;
    }

    if (alreadyFinished && refusedAfterTerminal) {
      return { ok: false, reason: "job_finished", message: "the job already has its terminal event" };
    }
    if (lastSeq !== generation.last_seq) {
      sql.exec("UPDATE generations SET last_seq = ? WHERE execution_id = ?", lastSeq, executionId);
    }
    return { ok: true, ack: { acked_seq: lastSeq, accepted: appended.length, duplicates }, appended, finished };
  }
}
