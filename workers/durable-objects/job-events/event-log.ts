/**
 * The durable half of the projector: one job's ordered event log in the Durable Object's SQLite.
 *
 * Hosts deliver at least once, in batches of one execution. Events are accepted by
 * (execution_id, seq): a seq already held is a duplicate (dropped, counted). The next contiguous
 * seq is appended; an event past a gap is held in a bounded per-execution gap buffer (SQLite,
 * so it survives eviction) until the missing seqs arrive, then the run is appended in seq order.
 * The ack only ever covers the contiguous prefix, so a buffered event is still resent by a host
 * that never saw it acknowledged (and then counts as a duplicate). Past the buffer's bounds an
 * event is refused (`deferred`): nothing is stored, the ack does not move, the host resends.
 *
 * The generation with the highest epoch is the only one that may write: a newer epoch retires
 * the older one (its gap buffer is dropped), a stale one is refused. Each appended event gets
 * the next per-job offset from 1, the id clients resume by. A job has exactly one terminal event;
 * nothing is appended after it, whether the host wrote it or the projector did from Postgres
 * (`appendProjectedTerminal`). The projector also writes the first event of an execution that
 * delivered none (`appendProjectedFirsts`), ahead of a later execution or the terminal event.
 *
 * Every ingest runs in one SQLite transaction, together with the nonce that makes a replayed
 * signed request a no-op, so a request is either wholly applied or not at all.
 */

import {
  type EventEnvelope,
  type IngestAck,
  isTerminalEventType,
  TERMINAL_EVENT_TYPES,
} from "../../../src/contracts/events";
import { SIGNATURE_MAX_SKEW_MS } from "../../../src/domain/signing";

/** A nonce is accepted while its timestamp is within ±60 s of now, i.e. up to ~120 s after it
 * arrives; remembering it for 180 s covers that window with margin for clock skew. */
export const NONCE_RETENTION_MS = 3 * SIGNATURE_MAX_SKEW_MS;

/**
 * Gap buffer bounds per execution. A host keeps one batch in flight and resends from
 * acked_seq + 1, so a real gap is at most a few batches; 1024 events / 1 MiB holds four full
 * 256-event outbox batches of ordinary deltas and keeps a misbehaving sender from filling the
 * object's storage.
 */
export const GAP_BUFFER_MAX_EVENTS = 1024;
export const GAP_BUFFER_MAX_BYTES = 1024 * 1024;

/** An event as the log keeps it: `body` is the envelope JSON, sent to clients verbatim. */
export interface LoggedEvent {
  offset: number;
  type: string;
  body: string;
}

/** The ingest acknowledgement, with what the gap buffer did with the rest of the batch. */
export type ProjectorAck = IngestAck;

export type IngestRejection = "replayed_nonce" | "stale_epoch" | "epoch_taken" | "job_finished" | "invalid_batch";

export type IngestOutcome =
  | { ok: true; ack: ProjectorAck; appended: LoggedEvent[]; finished: boolean }
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
  CREATE TABLE IF NOT EXISTS gap_buffer (
    execution_id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    type TEXT NOT NULL,
    body TEXT NOT NULL,
    PRIMARY KEY (execution_id, seq)
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

  /** Highest offset in the log (0 when empty). */
  get lastOffset(): number {
    return this.storage.sql.exec<{ n: number }>(`SELECT coalesce(max("offset"), 0) AS n FROM events`).one().n;
  }

  /** Events with offset > `after`, in offset order, at most `limit` of them. */
  readAfter(after: number, limit = -1): LoggedEvent[] {
    return this.storage.sql
      .exec<{ offset: number; type: string; body: string }>(
        `SELECT "offset", type, body FROM events WHERE "offset" > ? ORDER BY "offset" LIMIT ?`,
        after,
        limit,
      )
      .toArray()
      .map((r) => ({ offset: r.offset, type: r.type, body: r.body }));
  }

  /** The execution whose generation holds the highest epoch, if any event arrived yet. */
  currentGeneration(): Generation | null {
    return (
      this.storage.sql
        .exec<Generation>("SELECT execution_id, epoch, last_seq FROM generations ORDER BY epoch DESC LIMIT 1")
        .toArray()[0] ?? null
    );
  }

  /**
   * `firsts`: the projector's first events of earlier executions that delivered nothing
   * (appendProjectedFirsts), appended ahead of the batch when it opens a new generation.
   */
  ingest(
    jobId: string,
    events: readonly EventEnvelope[],
    nonce: string,
    now = Date.now(),
    firsts: readonly EventEnvelope[] = [],
  ): IngestOutcome {
    const shapeError = batchShapeError(jobId, events);
    if (shapeError) return { ok: false, reason: "invalid_batch", message: shapeError };
    const outcome = this.storage.transactionSync(() => this.ingestInTransaction(events, nonce, now, firsts));
    // Only after the commit: a thrown transaction must not leave the cache claiming a terminal.
    if (outcome.ok && outcome.finished && this.terminalOffset === null) {
      this.terminalOffset = outcome.appended.find((e) => isTerminalEventType(e.type))?.offset ?? null;
    }
    return outcome;
  }

  /** The highest contiguous seq of `executionId` in the log (0 when none of its events arrived). */
  deliveredThrough(executionId: string): number {
    const row = this.storage.sql
      .exec<{ last_seq: number }>("SELECT last_seq FROM generations WHERE execution_id = ?", executionId)
      .toArray()[0];
    return row?.last_seq ?? 0;
  }

  /** Whether an event of `executionId` arrived yet (a generation exists for it). */
  knowsExecution(executionId: string): boolean {
    return (
      this.storage.sql.exec("SELECT 1 FROM generations WHERE execution_id = ? LIMIT 1", executionId).toArray().length >
      0
    );
  }

  /**
   * Append a terminal event the projector derived from Postgres (see terminal-agreement.ts), preceded by
   * the first events of executions that delivered none (`firsts`, see appendProjectedFirsts), in
   * one transaction. Returns what was appended, or null when the log already has its terminal
   * event: there is exactly one per job.
   */
  appendProjectedTerminal(event: EventEnvelope, firsts: readonly EventEnvelope[] = []): LoggedEvent[] | null {
    if (!isTerminalEventType(event.type)) throw new Error(`${event.type} is not a terminal event type`);
    if (this.terminalOffset !== null) return null;
    const logged = this.storage.transactionSync(() => {
      const rows = this.appendProjectedFirsts(firsts);
      rows.push(this.insert(this.nextOffset(), event, JSON.stringify(event)));
      this.storage.sql.exec("DELETE FROM gap_buffer");
      return rows;
    });
    this.terminalOffset = (logged[logged.length - 1] as LoggedEvent).offset;
    return logged;
  }

  /**
   * The first events the projector derived from Postgres for executions that delivered nothing
   * (a `run.started` or `run.recovered` each, postgres-facts.ts), in epoch order. Only those of an
   * epoch above every event in the log are appended: an execution with any event of its own gets
   * none (no duplicate, whichever arrives first), and nothing lands behind a later execution's
   * events. No generation is created for them, so that execution's late batches stay refused by
   * the epoch fence (or, after the terminal event, as finished). Call inside a transaction.
   */
  private appendProjectedFirsts(firsts: readonly EventEnvelope[]): LoggedEvent[] {
    const rows: LoggedEvent[] = [];
    let newest = this.storage.sql.exec<{ n: number }>("SELECT coalesce(max(epoch), -1) AS n FROM events").one().n;
    for (const e of firsts) {
      if (e.epoch <= newest) continue;
      rows.push(this.insert(this.nextOffset(), e, JSON.stringify(e)));
      newest = e.epoch;
    }
    return rows;
  }

  private nextOffset(): number {
    return this.storage.sql.exec<{ n: number }>(`SELECT coalesce(max("offset"), 0) + 1 AS n FROM events`).one().n;
  }

  private insert(
    offset: number,
    e: { execution_id: string; epoch: number; seq: number; type: string },
    body: string,
  ): LoggedEvent {
    this.storage.sql.exec(
      `INSERT INTO events ("offset", execution_id, epoch, seq, type, body) VALUES (?, ?, ?, ?, ?, ?)`,
      offset,
      e.execution_id,
      e.epoch,
      e.seq,
      e.type,
      body,
    );
    return { offset, type: e.type, body };
  }

  private ingestInTransaction(
    events: readonly EventEnvelope[],
    nonce: string,
    now: number,
    firsts: readonly EventEnvelope[],
  ): IngestOutcome {
    const sql = this.storage.sql;
    sql.exec("DELETE FROM nonces WHERE ts < ?", now - NONCE_RETENTION_MS);
    if (sql.exec("SELECT 1 FROM nonces WHERE nonce = ?", nonce).toArray().length > 0) {
      return { ok: false, reason: "replayed_nonce", message: "this signed request was already received" };
    }
    sql.exec("INSERT INTO nonces (nonce, ts) VALUES (?, ?)", nonce, now);

    const { execution_id: executionId, epoch } = events[0] as EventEnvelope;
    const current = this.currentGeneration();
    let projected: LoggedEvent[] = [];
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
      // The older generation is retired: whatever it left in the gap buffer can never be appended.
      sql.exec("DELETE FROM gap_buffer WHERE execution_id != ?", executionId);
      // Up to this execution's own (projected when its batch opens with no first event).
      projected = this.appendProjectedFirsts(firsts.filter((e) => e.epoch <= epoch));
    }

    let lastSeq = generation.last_seq;
    const incoming = new Map<number, EventEnvelope>();
    let duplicates = 0;
    for (const e of events) {
      if (e.seq <= lastSeq || incoming.has(e.seq)) duplicates++;
      else incoming.set(e.seq, e);
    }

    if (this.terminalOffset !== null) {
      if (incoming.size > 0) {
        return { ok: false, reason: "job_finished", message: "the job already has its terminal event" };
      }
      return {
        ok: true,
        ack: { acked_seq: lastSeq, accepted: 0, duplicates, buffered: 0, deferred: 0 },
        appended: [],
        finished: true,
      };
    }

    const held = sql
      .exec<{ n: number; bytes: number }>(
        "SELECT count(*) AS n, coalesce(sum(length(body)), 0) AS bytes FROM gap_buffer WHERE execution_id = ?",
        executionId,
      )
      .one();
    let heldCount = held.n;
    let heldBytes = held.bytes;

    let nextOffset = this.nextOffset();
    let finished = false;
    const appended: LoggedEvent[] = [...projected];

    // Append the contiguous run, taking each next seq from the batch or from the gap buffer.
    for (;;) {
      const seq = lastSeq + 1;
      let type: string;
      let body: string;
      const fromBatch = incoming.get(seq);
      if (fromBatch) {
        incoming.delete(seq);
        type = fromBatch.type;
        body = JSON.stringify(fromBatch);
        if (heldCount > 0) {
          const removed = sql.exec<{ len: number }>(
            "DELETE FROM gap_buffer WHERE execution_id = ? AND seq = ? RETURNING length(body) AS len",
            executionId,
            seq,
          );
          for (const r of removed) {
            heldCount--;
            heldBytes -= r.len;
          }
        }
      } else {
        if (heldCount === 0) break;
        const row = sql
          .exec<{ type: string; body: string }>(
            "DELETE FROM gap_buffer WHERE execution_id = ? AND seq = ? RETURNING type, body",
            executionId,
            seq,
          )
          .toArray()[0];
        if (!row) break;
        heldCount--;
        heldBytes -= row.body.length;
        type = row.type;
        body = row.body;
      }
      appended.push(this.insert(nextOffset++, { execution_id: executionId, epoch, seq, type }, body));
      lastSeq = seq;
      if (isTerminalEventType(type)) {
        finished = true;
        break;
      }
    }

    let deferred = 0;
    if (finished) {
      // Nothing follows the terminal event: seqs behind it (batch or buffer) are discarded.
      sql.exec("DELETE FROM gap_buffer");
      heldCount = 0;
    } else {
      // What is left of the batch lies past a gap: hold it, within the buffer's bounds.
      for (const [seq, e] of [...incoming].sort((a, b) => a[0] - b[0])) {
        const body = JSON.stringify(e);
        if (heldCount + 1 > GAP_BUFFER_MAX_EVENTS || heldBytes + body.length > GAP_BUFFER_MAX_BYTES) {
          deferred++;
          continue;
        }
        const inserted = sql
          .exec(
            "INSERT INTO gap_buffer (execution_id, seq, type, body) VALUES (?, ?, ?, ?) ON CONFLICT DO NOTHING RETURNING seq",
            executionId,
            seq,
            e.type,
            body,
          )
          .toArray();
        if (inserted.length === 0) {
          duplicates++; // already held from an earlier batch
          continue;
        }
        heldCount++;
        heldBytes += body.length;
      }
    }

    if (lastSeq !== generation.last_seq) {
      sql.exec("UPDATE generations SET last_seq = ? WHERE execution_id = ?", lastSeq, executionId);
    }
    return {
      ok: true,
      ack: {
        acked_seq: lastSeq,
        accepted: appended.length - projected.length,
        duplicates,
        buffered: heldCount,
        deferred,
      },
      appended,
      finished,
    };
  }
}
