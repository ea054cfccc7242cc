/**
 * JobEventsObject — the projector, one Durable Object per job (`idFromName(job_id)`).
 *
 * It exists so every event of a job passes through one single-threaded place that can order,
 * dedupe and fence it, store it durably (event-log.ts, DO SQLite) and fan it out to every
 * watcher (sse-fanout.ts). Hosts reach it through the signed /internal/events route (RPC
 * `ingest`); clients through GET /v1/jobs/:id/events, which the gateway authorizes and then
 * forwards here as `GET /events?after=<offset>`.
 */
import { DurableObject } from "cloudflare:workers";
import type { IngestAck, IngestBatch } from "../../src/contracts";
import type { Env } from "../env";
import { EventLog, type IngestRejection } from "./event-log";
import { SseFanout } from "./sse-fanout";

export type IngestResult = { ok: true; ack: IngestAck } | { ok: false; reason: IngestRejection; message: string };

/** 10 s keeps well inside API.md's "a comment at least every 15 s" even with a busy isolate. */
const DEFAULT_HEARTBEAT_MS = 10_000;

export class JobEventsObject extends DurableObject<Env> {
  private readonly log: EventLog;
  private readonly fanout: SseFanout;

  constructor(ctx: DurableObjectState, env: Env) {
    super(ctx, env);
    this.log = new EventLog(ctx.storage);
    const heartbeatMs = Number(env.SSE_HEARTBEAT_MS);
    this.fanout = new SseFanout(Number.isFinite(heartbeatMs) && heartbeatMs > 0 ? heartbeatMs : DEFAULT_HEARTBEAT_MS);
  }

  /** Append a host's batch (see event-log.ts for the acceptance rules), then fan out what was new. */
  async ingest(batch: IngestBatch, nonce: string): Promise<IngestResult> {
    const outcome = this.log.ingest(batch.job_id, batch.events, nonce);
    if (!outcome.ok) return outcome;
    this.fanout.publish(outcome.appended, outcome.finished);
    return { ok: true, ack: outcome.ack };
  }

  /** Everything after `offset`, for tests and for consumers that poll rather than stream. */
  async readAfter(offset: number): Promise<Array<{ offset: number; type: string; event: unknown }>> {
    return this.log.readAfter(offset).map((e) => ({ offset: e.offset, type: e.type, event: JSON.parse(e.body) }));
  }

  override async fetch(request: Request): Promise<Response> {
    const url = new URL(request.url);
    if (request.method !== "GET" || url.pathname !== "/events") return new Response("not found", { status: 404 });
    const after = Number(url.searchParams.get("after") ?? "0");
    if (!Number.isSafeInteger(after) || after < 0) return new Response("bad cursor", { status: 400 });
    // Replay read and subscription happen in this one synchronous turn: nothing can interleave.
    return this.fanout.open(this.log.readAfter(after), this.log.finished);
  }
}
