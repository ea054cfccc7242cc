/**
 * JobEventsObject — the projector, one Durable Object per job (`idFromName(job_id)`).
 *
 * It exists so every event of a job passes through one single-threaded place that can order,
 * dedupe and fence it, store it durably and fan it out to every watcher: SSE subscribers and the
 * ChatSession objects that asked to `watch` the job. Hosts reach it through the signed
 * /internal/events route (RPC `ingest`); clients through GET /v1/jobs/:id/events, which the
 * gateway authorizes and then forwards here as `GET /events?after=<offset>&job_id=<id>`.
 *
 * This class only routes: each concern is a part beside it that owns its SQLite tables (schema
 * and queries) in this object's storage, so no SQL is written here (test/unit/layering.test.ts):
 * ingest trust (ingest-trust.ts), the log (event-log.ts), first events from Postgres
 * (first-events.ts), terminal agreement and the terminal check (terminal-agreement.ts), SSE and
 * stream leases (sse-streams.ts), chat pushes (chat-relay.ts), retention (retention.ts), the
 * job id and due time (object-meta.ts), and the one alarm (alarm-scheduler.ts), which each part
 * with a deadline is asked for. docs/events.md, "Projector", lists them with the tables each owns.
 *
 * A refused batch writes nothing at all (no job id, no alarm), so a request naming a job that
 * does not exist leaves no state behind: the job id is remembered only once the batch is
 * trusted and its first events are known.
 */

import { DurableObject } from "cloudflare:workers";
import { ApiError } from "../../../src/contracts/errors";
import { type IngestBatch, isTerminalEventType } from "../../../src/contracts/events";
import type { Env } from "../../env";
import { eventRetentionMs } from "../../gateway-config";
import { apiErrorResponse } from "../../middleware/error-handler/error-handler";
import type { IngestResult, JobEventsRpc, LogPage } from "../rpc";
import { AlarmScheduler } from "./alarm-scheduler";
import { ChatRelay } from "./chat-relay";
import { EventLog, type LoggedEvent } from "./event-log";
import { FirstEventProjection } from "./first-events";
import { IngestTrust } from "./ingest-trust";
import { ObjectMeta } from "./object-meta";
import { postgresExecutionHistory, postgresExecutionLookup, postgresJobStateLookup } from "./postgres-facts";
import { Retention } from "./retention";
import { isStreamRequest, parseStreamRequest, SseStreams } from "./sse-streams";
import { TerminalAgreement } from "./terminal-agreement";

export class JobEventsObject extends DurableObject<Env> implements JobEventsRpc {
  private readonly log: EventLog;
  private readonly meta: ObjectMeta;
  private readonly streams: SseStreams;
  private readonly relay: ChatRelay;
  private readonly alarms: AlarmScheduler;
  // The parts with injection points are not private: the workerd tests answer for Postgres and
  // shorten the clocks on the part itself (`instance.terminal.jobState = …`). Instance fields are
  // not reachable over RPC (Cloudflare's RPC visibility rules: only the class's methods and
  // accessors are), so this gives a caller of the object nothing new.
  /** Reads the executions row (`lookup`; the default reads Postgres over neon-http). */
  readonly trust: IngestTrust;
  /** Reads the job's executions and journal (`history`; the default reads Postgres). */
  readonly firsts: FirstEventProjection;
  /** Reads the job row (`jobState`) and waits `liveHostQuietMs` for a live host's own terminal event. */
  readonly terminal: TerminalAgreement;
  /** How long the log outlives its terminal event (`retentionMs`). */
  readonly retention: Retention;

  constructor(ctx: DurableObjectState, env: Env) {
    super(ctx, env);
    this.log = new EventLog(ctx.storage);
    this.meta = new ObjectMeta(ctx.storage);
    this.trust = new IngestTrust(ctx.storage, postgresExecutionLookup(env));
    this.firsts = new FirstEventProjection(this.log, postgresExecutionHistory(env));
    this.streams = new SseStreams(ctx, env);
    this.relay = new ChatRelay(ctx.storage, env);
    this.terminal = new TerminalAgreement(
      this.log,
      this.firsts,
      () => ({ sse: this.streams.size, chat: this.relay.size }),
      postgresJobStateLookup(env),
    );
    this.retention = new Retention(ctx.storage, this.meta, this.log, eventRetentionMs(env));
    this.alarms = new AlarmScheduler(ctx.storage, [this.terminal, this.retention]);
  }

  /**
   * Append a host's batch (see event-log.ts for the acceptance rules), then fan out what was new.
   * `eventsJson` is the batch's events exactly as the host serialized them: its `mac` covers them.
   */
  async ingest(batch: IngestBatch, nonce: string, eventsJson: string): Promise<IngestResult> {
    if (this.retention.expired)
      return { ok: false, reason: "job_finished", message: "the job's event log has expired" };
    const refused = await this.trust.verify(batch, nonce, eventsJson);
    if (refused) return refused;
    const terminal = this.log.finished ? undefined : batch.events.find((e) => isTerminalEventType(e.type));
    if (terminal) {
      const disagreement = await this.terminal.hostTerminal(batch.job_id, terminal);
      if (disagreement?.reason === "terminal_disagrees") {
        // The row is not (yet) terminal this way: the alarm projects the row's own terminal
        // event once it is, so it needs to know the job and to be pending.
        this.remember(batch.job_id);
        await this.alarms.reschedule();
      }
      if (disagreement) return disagreement;
    }
    const firsts = await this.firsts.beforeGeneration(batch);
    if (!Array.isArray(firsts)) return firsts;
    this.remember(batch.job_id);
    const outcome = this.log.ingest(batch.job_id, batch.events, nonce, Date.now(), firsts);
    if (!outcome.ok) return outcome;
    if (outcome.appended.length > 0) this.terminal.hostDelivered();
    this.publish(outcome.appended, outcome.finished);
    if (outcome.finished) this.retention.arm();
    await this.alarms.reschedule();
    return { ok: true, ack: outcome.ack };
  }

  /** Everything after `offset` (at most `limit`), for tests and for consumers that poll. */
  async readAfter(offset: number, limit = -1): Promise<Array<{ offset: number; type: string; event: unknown }>> {
    if (this.retention.expired) return [];
    return this.log
      .readAfter(offset, limit)
      .map((e) => ({ offset: e.offset, type: e.type, event: JSON.parse(e.body) }));
  }

  /** A page of raw log rows after `offset`, and whether the log is complete. */
  async page(offset: number, limit: number): Promise<LogPage> {
    if (this.retention.expired) return { events: [], finished: true };
    return { events: this.log.readAfter(offset, limit), finished: this.log.finished };
  }

  /**
   * A ChatSession (by name) asks to be sent every event appended from now on. Idempotent; the
   * session pulls what it missed with `page`, so registration racing an append loses nothing.
   */
  async watch(jobId: string, chatName: string): Promise<{ finished: boolean; lastOffset: number }> {
    if (this.retention.expired) return { finished: true, lastOffset: 0 };
    this.remember(jobId);
    this.relay.add(chatName);
    if (!this.log.finished) await this.alarms.reschedule();
    return { finished: this.log.finished, lastOffset: this.log.lastOffset };
  }

  override async fetch(request: Request): Promise<Response> {
    if (!isStreamRequest(request)) return new Response("not found", { status: 404 });
    if (this.retention.expired) {
      const handedOver = parseStreamRequest(request);
      if (!(handedOver instanceof Response)) this.streams.releaseHandedOver(handedOver);
      return apiErrorResponse(
        new ApiError("events_expired", "this job's events were deleted after the event retention"),
      );
    }
    const req = parseStreamRequest(request);
    if (req instanceof Response) return req;
    if (req.jobId) this.remember(req.jobId);
    const { response, opened } = await this.streams.open(req, this.log);
    if (opened && !this.log.finished) await this.alarms.reschedule();
    return response;
  }

  /**
   * The one alarm: the retention's once the log is finished, else the terminal check (a
   * projected terminal event finishes the log and starts the retention).
   */
  override async alarm(): Promise<void> {
    if (this.retention.expired) return;
    if (this.log.finished) {
      if (await this.retention.expireIfDue()) this.alarms.forget();
      else await this.alarms.reschedule(true);
      return;
    }
    const jobId = this.meta.jobId();
    if (jobId === null) return; // never told which job this is: nothing to ask Postgres about
    const checked = await this.terminal.checkRow(jobId);
    // No such job: nothing will ever arrive for it, so nothing is scheduled again.
    if (checked.kind === "no_job") return;
    if (checked.kind === "projected") {
      this.publish(checked.events, true);
      this.retention.arm();
      await this.alarms.reschedule();
      return;
    }
    if (!this.log.finished) await this.alarms.reschedule(true);
  }

  private publish(appended: LoggedEvent[], finished: boolean): void {
    this.streams.publish(appended, finished);
    const jobId = this.meta.jobId();
    if (jobId !== null && appended.length > 0) this.relay.push(jobId, appended);
    if (finished) this.terminal.logFinished();
  }

  /** Remember which job this object serves, unless its storage is gone (a write would recreate it). */
  private remember(jobId: string): void {
    if (!this.retention.expired) this.meta.rememberJobId(jobId);
  }
}
