/**
 * Ingest trust: who may write this job's stream (docs/events.md, "Ingest trust").
 *
 * The shared signing secret says only that a host sent the request. A batch is written only if
 * its execution is one Postgres says ran this job (executions row: epoch, claim token) and its
 * `mac` verifies under the key derived from that token. The first batch of a generation costs
 * one Postgres read; the verified generation and its key are then kept in this object's SQLite
 * (table `trusted_generations`, owned here) and in memory, so later batches cost an HMAC and no
 * read. Nothing is written for a batch that is refused, so a request naming a job that does not
 * exist leaves no state behind.
 */
import type { IngestBatch } from "../../../src/contracts/events";
import { importIngestKey, ingestKeyHex, verifyBatchMac } from "../../../src/domain/signing";
import { log } from "../../log";
import type { IngestRefusal } from "../rpc";
import type { ExecutionLookup } from "./postgres-facts";

export class IngestTrust {
  /** Verified generations' ingest keys, imported (the table holds the key bytes as hex). */
  private readonly keys = new Map<string, { epoch: number; key: CryptoKey }>();

  /** @param lookup reads the executions row; injectable (tests set `JobEventsObject.trust.lookup`). */
  constructor(
    private readonly storage: DurableObjectStorage,
    public lookup: ExecutionLookup,
  ) {
    storage.sql.exec(
      "CREATE TABLE IF NOT EXISTS trusted_generations (execution_id TEXT PRIMARY KEY, epoch INTEGER NOT NULL, ingest_key TEXT NOT NULL)",
    );
  }

  /**
   * The batch's execution must be one Postgres says ran this job, at this epoch, and its mac must
   * verify under that execution's ingest key. Returns the refusal, or null when trusted. Writes
   * nothing unless the batch is trusted (then the generation and its key, once).
   */
  async verify(batch: IngestBatch, nonce: string, eventsJson: string): Promise<IngestRefusal | null> {
    const first = batch.events[0];
    if (!first) return { ok: false, reason: "invalid_batch", message: "events must not be empty" };
    const executionId = first.execution_id;
    let trusted = this.keys.get(executionId);
    let fresh: string | null = null;
    if (!trusted) {
      const row = this.storage.sql
        .exec<{ epoch: number; ingest_key: string }>(
          "SELECT epoch, ingest_key FROM trusted_generations WHERE execution_id = ?",
          executionId,
        )
        .toArray()[0];
      if (row) {
        trusted = { epoch: row.epoch, key: await importIngestKey(row.ingest_key) };
        this.keys.set(executionId, trusted);
      } else {
        let facts: Awaited<ReturnType<ExecutionLookup>>;
        try {
          facts = await this.lookup(batch.job_id, executionId);
        } catch (err) {
          log.warn("execution lookup failed", { executionId, error: err });
          return { ok: false, reason: "unavailable", message: "cannot check the execution in Postgres" };
        }
        if (!facts?.token) {
          return {
            ok: false,
            reason: "unknown_execution",
            message: `job ${batch.job_id} has no execution ${executionId} that can sign events`,
          };
        }
        fresh = await ingestKeyHex(facts.token, executionId);
        trusted = { epoch: facts.epoch, key: await importIngestKey(fresh) };
      }
    }
    if (first.epoch !== trusted.epoch) {
      return {
        ok: false,
        reason: "wrong_epoch",
        message: `execution ${executionId} started at epoch ${trusted.epoch}, not ${first.epoch}`,
      };
    }
    if (!(await verifyBatchMac(trusted.key, nonce, batch.job_id, eventsJson, batch.mac))) {
      return { ok: false, reason: "bad_mac", message: `the batch's mac does not verify for execution ${executionId}` };
    }
    if (fresh !== null) {
      this.storage.sql.exec(
        "INSERT OR IGNORE INTO trusted_generations (execution_id, epoch, ingest_key) VALUES (?, ?, ?)",
        executionId,
        trusted.epoch,
        fresh,
      );
      this.keys.set(executionId, trusted);
    }
    return null;
  }
}
