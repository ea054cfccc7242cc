/**
 * The object's SSE endpoint, `GET /events?after=<offset>&job_id=<id>[&tenant_id=<t>&stream_cap=<n>]`
 * or `[&tenant_id=<t>&lease=<id>]` as the gateway forwards it (workers/routes/job-events.ts): the
 * request's parsing, the tenant's stream leases (one per counted subscriber,
 * tenant-streams/stream-leases.ts: taken here with `stream_cap`, or already taken by the gateway
 * and handed over with `lease`) and the subscribers themselves (sse-fanout.ts). A job belongs to one tenant, so every lease this object holds is
 * that tenant's. It owns no table: the replay comes from the event log, the leases live in the
 * tenant's TenantStreams object.
 */
import { SSE_FINISHED_STATUS } from "../../../src/contracts/sse";
import type { Env } from "../../env";
import { acquireStreamSlot, settleLeases } from "../tenant-streams/stream-leases";
import type { EventLog, LoggedEvent } from "./event-log";
import { SseFanout } from "./sse-fanout";

/** 10 s keeps well inside the promised "a comment at least every 15 s" even with a busy isolate. */
const DEFAULT_HEARTBEAT_MS = 10_000;

/** What the gateway asked for. */
export interface StreamRequest {
  /** The client's cursor: replay every event after this offset. */
  after: number;
  /** The job the object serves (so a fresh object knows which row to check). */
  jobId: string | null;
  /** The tenant whose stream slot a live subscription takes, and its cap; none: uncounted. */
  tenantId: string | null;
  streamCap: number;
  /** A lease the gateway already took for this stream: held if the object subscribes, else released. */
  lease: string | null;
}

/** Whether the request is the object's one HTTP route. */
export function isStreamRequest(request: Request): boolean {
  return request.method === "GET" && new URL(request.url).pathname === "/events";
}

/** The request's parameters, or the 400 for a cursor that is no offset. */
export function parseStreamRequest(request: Request): StreamRequest | Response {
  const params = new URL(request.url).searchParams;
  const after = Number(params.get("after") ?? "0");
  if (!Number.isSafeInteger(after) || after < 0) return new Response("bad cursor", { status: 400 });
  return {
    after,
    jobId: params.get("job_id") || null,
    tenantId: params.get("tenant_id") || null,
    streamCap: Number(params.get("stream_cap") ?? 0),
    lease: params.get("lease") || null,
  };
}

export class SseStreams {
  private readonly fanout: SseFanout;
  /** The tenant whose stream leases this object holds (set by the first counted subscriber). */
  private leaseTenant: string | null = null;

  constructor(
    private readonly ctx: DurableObjectState,
    private readonly env: Env,
  ) {
    const heartbeatMs = Number(env.SSE_HEARTBEAT_MS);
    this.fanout = new SseFanout(Number.isFinite(heartbeatMs) && heartbeatMs > 0 ? heartbeatMs : DEFAULT_HEARTBEAT_MS, {
      renew: (ids) => this.settle("renew", ids),
      release: (ids) => this.settle("release", ids),
    });
  }

  /** Subscribers right now. */
  get size(): number {
    return this.fanout.size;
  }

  publish(events: LoggedEvent[], finished: boolean): void {
    this.fanout.publish(events, finished);
  }

  /**
   * Answer a stream request from the log. `opened`: a stream was opened (a replay, subscribed
   * unless the log is finished); false for the finished-log 204 and a refused stream slot.
   */
  async open(req: StreamRequest, log: EventLog): Promise<{ response: Response; opened: boolean }> {
    // Finished, and the client has it all: 204 is the one answer that stops an EventSource
    // reconnecting (a 200 that closes is reconnected to every `retry:`, forever).
    if (log.finished && req.after >= log.lastOffset) {
      this.releaseHandedOver(req);
      return { response: new Response(null, { status: SSE_FINISHED_STATUS }), opened: false };
    }
    // The gateway names the tenant and its stream cap (or the lease it took); a finished log is a
    // replay that closes at once, so it takes no slot.
    let lease: string | null = null;
    if (req.tenantId && req.lease) {
      this.leaseTenant = req.tenantId;
      if (log.finished) this.releaseHandedOver(req);
      else lease = req.lease;
    } else if (req.tenantId && !log.finished) {
      this.leaseTenant = req.tenantId;
      const slot = await acquireStreamSlot(this.env, req.tenantId, "sse", req.streamCap);
      if (slot instanceof Response) return { response: slot, opened: false };
      lease = slot;
    }
    // Replay read and subscription happen in this one synchronous turn: nothing can interleave.
    return { response: this.fanout.open(log.readAfter(req.after), log.finished, lease), opened: true };
  }

  /** A lease the gateway took for a stream this object does not subscribe goes back at once. */
  releaseHandedOver(req: StreamRequest): void {
    if (req.tenantId && req.lease) this.ctx.waitUntil(settleLeases(this.env, req.tenantId, "release", [req.lease]));
  }

  private settle(op: "renew" | "release", ids: string[]): void {
    if (this.leaseTenant === null || ids.length === 0) return;
    this.ctx.waitUntil(settleLeases(this.env, this.leaseTenant, op, ids));
  }
}
