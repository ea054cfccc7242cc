/**
 * JobEventsObject — the projector, one Durable Object per job (`idFromName(job_id)`).
 *
 * It exists so every event of a job passes through one single-threaded place that can order,
 * dedupe and fence it, store it durably (event-log.ts, DO SQLite) and fan it out to every
 * watcher: SSE subscribers (sse-fanout.ts) and the ChatSession objects that asked to `watch` the
 * job (chat-relay.ts). Hosts reach it through the signed /internal/events route (RPC `ingest`);
 * clients through GET /v1/jobs/:id/events, which the gateway authorizes and then forwards here as
 * `GET /events?after=<offset>&job_id=<id>`.
 *
 * Retention: once the log has its terminal event the terminal check is over, so the same single
 * alarm is re-armed for terminal time + JOB_EVENTS_RETENTION_S, and then deletes all of the
 * object's storage (deleteAll). The gateway answers 410 `events_expired` for such a job from the
 * row's finished_at without asking the object, since an emptied object cannot tell "expired"
 * from "no events yet".
 *
 * No stream waits forever: while the log has no terminal event, an alarm asks Postgres for the
 * job's state (postgres-facts.ts) and, when the job is terminal there (lost, timed out, cancelled
 * before it started, or a host that died after writing its terminal state), appends the matching
 * terminal event itself. Cadence: every second while an SSE client watches, every 5 s while only
 * chat sessions do, otherwise backing off from 10 s to 5 min; one indexed row read per alarm.
 *
 * Trust: the shared signing secret says only that a host sent the request. A batch is written
 * only if its execution is one Postgres says ran this job (executions row: epoch, claim token)
 * and its `mac` verifies under the key derived from that token. The first batch of a generation
 * costs one Postgres read; the verified generation and its key are then kept in SQLite, so later
 * batches cost none. A host's terminal event costs one more read: it is appended only if the
 * job row agrees with it. A refused batch writes nothing at all (no job id, no alarm), so a
 * request naming a job that does not exist leaves no state behind.
 */

import { DurableObject } from "cloudflare:workers";
import { ApiError } from "../../../src/contracts/errors";
import { type EventEnvelope, type IngestBatch, isTerminalEventType } from "../../../src/contracts/events";
import { SSE_FINISHED_STATUS } from "../../../src/contracts/sse";
import { importIngestKey, ingestKeyHex, verifyBatchMac } from "../../../src/domain/signing";
import type { Env } from "../../env";
import { eventRetentionMs } from "../../gateway-config";
import { log } from "../../log";
import { apiErrorResponse } from "../../middleware/error-handler/error-handler";
import type { IngestResult, JobEventsRpc, LogPage } from "../rpc";
import { acquireStreamSlot, settleLeases } from "../tenant-streams/stream-leases";
import { ChatRelay } from "./chat-relay";
import { EventLog, type LoggedEvent } from "./event-log";
import {
  type ExecutionHistoryLookup,
  type ExecutionLookup,
  type JobStateFacts,
  type JobStateLookup,
  postgresExecutionHistory,
  postgresExecutionLookup,
  postgresJobStateLookup,
  projectedFirstEvents,
  projectedStarted,
  projectedTerminal,
  terminalDisagreement,
} from "./postgres-facts";
import { SseFanout } from "./sse-fanout";

type Refusal = Extract<IngestResult, { ok: false }>;

/** 10 s keeps well inside the promised "a comment at least every 15 s" even with a busy isolate. */
const DEFAULT_HEARTBEAT_MS = 10_000;

export const TERMINAL_CHECK = {
  /** An SSE client is waiting on this job. */
  watchedMs: 1_000,
  /** Only chat sessions are relaying this job. */
  relayedMs: 5_000,
  /** Nobody watches: first check, then doubling up to the cap. */
  idleFirstMs: 10_000,
  idleMaxMs: 5 * 60_000,
  /**
   * A host delivered events this recently: it is alive and will send the terminal event itself,
   * so the alarm skips its Postgres read. Only a stream that went quiet (host dead, job ended
   * without events, a slow model turn) costs a read, so 100 watched running jobs do not mean
   * 100 Postgres reads a second.
   */
  liveHostQuietMs: 3_000,
} as const;

export class JobEventsObject extends DurableObject<Env> implements JobEventsRpc {
  private readonly log: EventLog;
  private readonly fanout: SseFanout;
  private readonly relay: ChatRelay;
  /** Injectable for tests; the default reads Postgres over neon-http. */
  jobState: JobStateLookup;
  /** Injectable for tests; the default reads the executions row over neon-http. */
  executionLookup: ExecutionLookup;
  /** Injectable for tests; the default reads the job's executions (and journal) over neon-http. */
  executionHistory: ExecutionHistoryLookup;
  /** Verified generations' ingest keys, imported (SQLite `trusted_generations` holds the bytes). */
  private readonly trustedKeys = new Map<string, { epoch: number; key: CryptoKey }>();
  private idleDelayMs: number = TERMINAL_CHECK.idleFirstMs;
  /** When a host last delivered new events (memory only: after an eviction the alarm just reads). */
  private lastHostEventAt = 0;
  /** Injectable for tests: see TERMINAL_CHECK.liveHostQuietMs. */
  liveHostQuietMs: number = TERMINAL_CHECK.liveHostQuietMs;
  /** How long the log outlives its terminal event (injectable for tests). */
  retentionMs: number;
  /**
   * Set once this instance deleted its storage: from then on nothing may touch SQLite (its tables
   * are gone, and any write would recreate the storage the retention just freed).
   */
  private expired = false;

  constructor(ctx: DurableObjectState, env: Env) {
    super(ctx, env);
    this.log = new EventLog(ctx.storage);
    ctx.storage.sql.exec("CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)");
    ctx.storage.sql.exec(
      "CREATE TABLE IF NOT EXISTS trusted_generations (execution_id TEXT PRIMARY KEY, epoch INTEGER NOT NULL, ingest_key TEXT NOT NULL)",
    );
    const heartbeatMs = Number(env.SSE_HEARTBEAT_MS);
    // A job belongs to one tenant, so every lease this object holds is that tenant's.
    this.fanout = new SseFanout(Number.isFinite(heartbeatMs) && heartbeatMs > 0 ? heartbeatMs : DEFAULT_HEARTBEAT_MS, {
      renew: (ids) => this.settle("renew", ids),
      release: (ids) => this.settle("release", ids),
    });
    this.relay = new ChatRelay(ctx.storage, env);
    this.jobState = postgresJobStateLookup(env);
    this.executionLookup = postgresExecutionLookup(env);
    this.executionHistory = postgresExecutionHistory(env);
    this.retentionMs = eventRetentionMs(env);
  }

  /**
   * Append a host's batch (see event-log.ts for the acceptance rules), then fan out what was new.
   * `eventsJson` is the batch's events exactly as the host serialized them: its `mac` covers them.
   */
  async ingest(batch: IngestBatch, nonce: string, eventsJson: string): Promise<IngestResult> {
    if (this.expired) return { ok: false, reason: "job_finished", message: "the job's event log has expired" };
    const refused = await this.verifyOwnership(batch, nonce, eventsJson);
    if (refused) return refused;
    const terminal = this.log.finished ? undefined : batch.events.find((e) => isTerminalEventType(e.type));
    if (terminal) {
      const disagreement = await this.checkTerminal(batch.job_id, terminal);
      if (disagreement) return disagreement;
    }
    const firsts = await this.firstsBeforeGeneration(batch);
    if (!Array.isArray(firsts)) return firsts;
    this.rememberJobId(batch.job_id);
    const outcome = this.log.ingest(batch.job_id, batch.events, nonce, Date.now(), firsts);
    if (!outcome.ok) return outcome;
    if (outcome.appended.length > 0) this.lastHostEventAt = Date.now();
    this.publish(outcome.appended, outcome.finished);
    if (outcome.finished) await this.armRetention();
    else await this.scheduleTerminalCheck();
    return { ok: true, ack: outcome.ack };
  }

  /**
   * The batch's execution must be one Postgres says ran this job, at this epoch, and its mac must
   * verify under that execution's ingest key. Returns the refusal, or null when trusted. Writes
   * nothing unless the batch is trusted (then the generation and its key, once).
   */
  private async verifyOwnership(batch: IngestBatch, nonce: string, eventsJson: string): Promise<Refusal | null> {
    const first = batch.events[0];
    if (!first) return { ok: false, reason: "invalid_batch", message: "events must not be empty" };
    const executionId = first.execution_id;
    let trusted = this.trustedKeys.get(executionId);
    let fresh: string | null = null;
    if (!trusted) {
      const row = this.ctx.storage.sql
        .exec<{ epoch: number; ingest_key: string }>(
          "SELECT epoch, ingest_key FROM trusted_generations WHERE execution_id = ?",
          executionId,
        )
        .toArray()[0];
      if (row) {
        trusted = { epoch: row.epoch, key: await importIngestKey(row.ingest_key) };
        this.trustedKeys.set(executionId, trusted);
      } else {
        let facts: Awaited<ReturnType<ExecutionLookup>>;
        try {
          facts = await this.executionLookup(batch.job_id, executionId);
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
      this.ctx.storage.sql.exec(
        "INSERT OR IGNORE INTO trusted_generations (execution_id, epoch, ingest_key) VALUES (?, ?, ?)",
        executionId,
        trusted.epoch,
        fresh,
      );
      this.trustedKeys.set(executionId, trusted);
    }
    return null;
  }

  /**
   * The first batch of an execution that did not open the job (its first event is not
   * `run.started`: it recovers from the journal or resumes from a wait) may follow executions that
   * delivered nothing, e.g. a recovering host SIGKILLed before its outbox sent `run.recovered`.
   * Postgres still knows them (executions rows, the journal), so their first events are projected
   * ahead of this batch, in order (EventLog.appendProjectedFirsts). One read per such generation;
   * an execution that opens the job, a generation already in the log, or a stale one costs none. A failed read
   * refuses the batch (`unavailable`: the host resends), so no recovery is skipped for good.
   */
  private async firstsBeforeGeneration(batch: IngestBatch): Promise<EventEnvelope[] | Refusal> {
    const first = batch.events[0] as EventEnvelope;
    if (this.log.finished || this.log.knowsExecution(first.execution_id)) return [];
    // An epoch the log has already passed is refused as stale (EventLog): not worth a read.
    if ((this.log.currentGeneration()?.epoch ?? -1) >= first.epoch) return [];
    const opening = batch.events.find((e) => e.seq === 1);
    if (opening?.type === "run.started") return [];
    // A first batch that opens with no first event at all (its host could not read the job row,
    // agent-loop.ts readRow, and sent only its end): this execution's own first event is
    // projected too, ahead of its events.
    const ownToo = opening !== undefined && opening.type !== "run.recovered" && opening.type !== "run.resumed";
    try {
      const history = await this.executionHistory(batch.job_id);
      return projectedFirstEvents(batch.job_id, history, ownToo ? first.epoch + 1 : first.epoch);
    } catch (err) {
      log.warn("execution history lookup failed", { jobId: batch.job_id, error: err });
      return { ok: false, reason: "unavailable", message: "cannot read the job's executions in Postgres" };
    }
  }

  /**
   * What precedes a projected terminal event: the first events of the executions up to the row's
   * own that delivered none (projectedFirstEvents; the log drops any it already has an event
   * for). When Postgres has no executions row for the row's execution (none is written before
   * the started CAS, so only a stale read), the row alone says it started: `run.started`.
   */
  private async firstsBeforeTerminal(jobId: string, facts: JobStateFacts): Promise<EventEnvelope[]> {
    if (facts.executionId === null) return [];
    const history = await this.executionHistory(jobId);
    const firsts = projectedFirstEvents(jobId, history, facts.epoch + 1);
    if (!history.some((x) => x.executionId === facts.executionId)) {
      const started = projectedStarted(jobId, facts);
      if (started) firsts.push(started);
    }
    return firsts;
  }

  /**
   * A host's terminal event is appended only if the job row agrees (one Postgres read per job
   * end). One that disagrees is refused; the job id is remembered and the alarm projects the
   * row's own terminal event once the row is terminal.
   */
  private async checkTerminal(jobId: string, event: EventEnvelope): Promise<Refusal | null> {
    let reason: string | null;
    try {
      reason = terminalDisagreement(event, await this.jobState(jobId));
    } catch (err) {
      log.warn("job row lookup for a terminal event failed", { jobId, error: err });
      return { ok: false, reason: "unavailable", message: "cannot check the job row in Postgres" };
    }
    if (reason === null) return null;
    this.rememberJobId(jobId);
    await this.scheduleTerminalCheck();
    return { ok: false, reason: "terminal_disagrees", message: `${event.type} refused: ${reason}` };
  }

  /** Everything after `offset` (at most `limit`), for tests and for consumers that poll. */
  async readAfter(offset: number, limit = -1): Promise<Array<{ offset: number; type: string; event: unknown }>> {
    if (this.expired) return [];
    return this.log
      .readAfter(offset, limit)
      .map((e) => ({ offset: e.offset, type: e.type, event: JSON.parse(e.body) }));
  }

  /** A page of raw log rows after `offset`, and whether the log is complete. */
  async page(offset: number, limit: number): Promise<LogPage> {
    if (this.expired) return { events: [], finished: true };
    return { events: this.log.readAfter(offset, limit), finished: this.log.finished };
  }

  /**
   * A ChatSession (by name) asks to be sent every event appended from now on. Idempotent; the
   * session pulls what it missed with `page`, so registration racing an append loses nothing.
   */
  async watch(jobId: string, chatName: string): Promise<{ finished: boolean; lastOffset: number }> {
    if (this.expired) return { finished: true, lastOffset: 0 };
    this.rememberJobId(jobId);
    this.relay.add(chatName);
    if (!this.log.finished) await this.scheduleTerminalCheck();
    return { finished: this.log.finished, lastOffset: this.log.lastOffset };
  }

  override async fetch(request: Request): Promise<Response> {
    const url = new URL(request.url);
    if (request.method !== "GET" || url.pathname !== "/events") return new Response("not found", { status: 404 });
    if (this.expired) {
      return apiErrorResponse(
        new ApiError("events_expired", "this job's events were deleted after the event retention"),
      );
    }
    const after = Number(url.searchParams.get("after") ?? "0");
    if (!Number.isSafeInteger(after) || after < 0) return new Response("bad cursor", { status: 400 });
    const jobId = url.searchParams.get("job_id");
    if (jobId) this.rememberJobId(jobId);
    // Finished, and the client has it all: 204 is the one answer that stops an EventSource
    // reconnecting (a 200 that closes is reconnected to every `retry:`, forever).
    if (this.log.finished && after >= this.log.lastOffset) return new Response(null, { status: SSE_FINISHED_STATUS });
    // The gateway names the tenant and its stream cap; a finished log is a replay that closes at
    // once, so it takes no slot.
    const tenantId = url.searchParams.get("tenant_id");
    let lease: string | null = null;
    if (tenantId && !this.log.finished) {
      this.leaseTenant = tenantId;
      const slot = await acquireStreamSlot(this.env, tenantId, "sse", Number(url.searchParams.get("stream_cap") ?? 0));
      if (slot instanceof Response) return slot;
      lease = slot;
    }
    // Replay read and subscription happen in this one synchronous turn: nothing can interleave.
    const response = this.fanout.open(this.log.readAfter(after), this.log.finished, lease);
    if (!this.log.finished) await this.scheduleTerminalCheck();
    return response;
  }

  /** The terminal check: Postgres says terminal and the log does not → append it ourselves. */
  override async alarm(): Promise<void> {
    if (this.expired) return;
    if (this.log.finished) {
      await this.expireIfDue();
      return;
    }
    const jobId = this.jobId();
    if (jobId === null) return; // never told which job this is: nothing to ask Postgres about
    if (Date.now() - this.lastHostEventAt < this.liveHostQuietMs) {
      await this.scheduleTerminalCheck(true);
      return;
    }
    try {
      const facts = await this.jobState(jobId);
      // No such job: nothing will ever arrive for it, so nothing is scheduled again.
      if (facts === null) return;
      const terminal = projectedTerminal(jobId, facts);
      if (terminal && !this.log.finished) {
        // A host that died right after its started CAS (or its recovery's journal write) took its
        // first event with it: Postgres still says the execution ran, so the stream says so too,
        // before the terminal event.
        const firsts = await this.firstsBeforeTerminal(jobId, facts);
        const logged = this.log.finished ? null : this.log.appendProjectedTerminal(terminal, firsts);
        if (logged) {
          log.info("projected events from Postgres", { jobId, types: logged.map((e) => e.type) });
          this.publish(logged, true);
          await this.armRetention();
          return;
        }
      }
    } catch (err) {
      log.warn("terminal check failed; will retry", { jobId, error: err });
    }
    if (!this.log.finished) await this.scheduleTerminalCheck(true);
  }

  private publish(appended: LoggedEvent[], finished: boolean): void {
    this.fanout.publish(appended, finished);
    const jobId = this.jobId();
    if (jobId !== null && appended.length > 0) this.relay.push(jobId, appended);
    if (finished) this.idleDelayMs = TERMINAL_CHECK.idleFirstMs;
  }

  /** Keep one alarm pending at the cadence the current watchers need (never later than due). */
  private async scheduleTerminalCheck(fromAlarm = false): Promise<void> {
    let delay: number;
    if (this.fanout.size > 0) delay = TERMINAL_CHECK.watchedMs;
    else if (this.relay.size > 0) delay = TERMINAL_CHECK.relayedMs;
    else {
      delay = this.idleDelayMs;
      if (fromAlarm) this.idleDelayMs = Math.min(this.idleDelayMs * 2, TERMINAL_CHECK.idleMaxMs);
    }
    const due = Date.now() + delay;
    // Cached so the ingest hot path costs no storage read: only this object sets its alarm.
    if (fromAlarm) this.alarmDue = null;
    else if (this.alarmDue === undefined) this.alarmDue = await this.ctx.storage.getAlarm();
    if (this.alarmDue === null || this.alarmDue < Date.now() || this.alarmDue > due) {
      await this.ctx.storage.setAlarm(due);
      this.alarmDue = due;
    }
  }

  private alarmDue: number | null | undefined;

  /**
   * The log just got its terminal event: the one alarm now counts down the retention (replacing
   * a pending terminal check, which has nothing left to do). The due time is kept in `meta` so
   * a terminal-check alarm already in flight, or an object finished before retention existed,
   * cannot delete early: expireIfDue reads it.
   */
  private async armRetention(): Promise<void> {
    const due = Date.now() + this.retentionMs;
    this.ctx.storage.sql.exec("INSERT OR REPLACE INTO meta (key, value) VALUES ('expires_at', ?)", String(due));
    await this.ctx.storage.setAlarm(due);
    this.alarmDue = due;
  }

  /** On the alarm of a finished log: delete everything once the retention has passed, else re-arm. */
  private async expireIfDue(): Promise<void> {
    const stored = this.ctx.storage.sql
      .exec<{ value: string }>("SELECT value FROM meta WHERE key = 'expires_at'")
      .toArray()[0]?.value;
    if (stored === undefined) {
      await this.armRetention();
      return;
    }
    const due = Number(stored);
    if (Date.now() < due) {
      await this.ctx.storage.setAlarm(due);
      this.alarmDue = due;
      return;
    }
    this.expired = true;
    await this.ctx.storage.deleteAlarm();
    await this.ctx.storage.deleteAll();
    this.alarmDue = null;
    log.info("event log deleted after its retention", { jobId: this.cachedJobId ?? null });
  }

  /** The tenant whose stream leases this object holds (set by the first counted subscriber). */
  private leaseTenant: string | null = null;

  private settle(op: "renew" | "release", ids: string[]): void {
    if (this.leaseTenant === null || ids.length === 0) return;
    this.ctx.waitUntil(settleLeases(this.env, this.leaseTenant, op, ids));
  }

  private cachedJobId: string | null | undefined;

  private jobId(): string | null {
    if (this.cachedJobId === undefined) {
      this.cachedJobId =
        this.ctx.storage.sql.exec<{ value: string }>("SELECT value FROM meta WHERE key = 'job_id'").toArray()[0]
          ?.value ?? null;
    }
    return this.cachedJobId;
  }

  private rememberJobId(jobId: string): void {
    if (this.expired || this.jobId() !== null) return;
    this.ctx.storage.sql.exec("INSERT OR IGNORE INTO meta (key, value) VALUES ('job_id', ?)", jobId);
    this.cachedJobId = jobId;
  }
}
