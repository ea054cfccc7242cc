/**
 * The live half of the projector: Server-Sent Events subscribers of one job.
 *
 * A subscriber gets its replay and then every live event through one TransformStream writer.
 * The caller reads the replay and calls `open` in the same synchronous turn, so no ingest can
 * slip between the two (a Durable Object runs one turn at a time): no duplicate, no gap.
 * Writes are never awaited, so one slow reader cannot hold up the others; a reader that lets
 * more than MAX_QUEUED_CHUNKS pile up, or whose write fails (disconnected), is dropped and can
 * resume with Last-Event-ID.
 *
 * A subscriber may hold a stream lease (tenant-streams.ts): renewed at every keepalive while it
 * is subscribed, released when it is closed or dropped.
 */
import { SSE_RETRY_MS } from "../../src/contracts/sse";
import type { LoggedEvent } from "./event-log";

const MAX_QUEUED_CHUNKS = 256;
const encoder = new TextEncoder();
const KEEPALIVE = encoder.encode(": keepalive\n\n");
/** Every stream opens with the reconnect delay a client should use (src/contracts/sse.ts). */
const RETRY_FIELD = `retry: ${SSE_RETRY_MS}\n\n`;

export const SSE_HEADERS = {
  "content-type": "text/event-stream",
  "cache-control": "no-cache",
  "x-accel-buffering": "no",
} as const;

export function sseFrame(e: LoggedEvent): string {
  return `id: ${e.offset}\nevent: ${e.type}\ndata: ${e.body}\n\n`;
}

type Writer = WritableStreamDefaultWriter<Uint8Array>;

/** What the fanout does with its subscribers' stream leases (none: the leases are not counted). */
export interface LeaseHooks {
  renew(leases: string[]): void;
  release(leases: string[]): void;
}

export class SseFanout {
  /** Each subscriber with its stream lease, if it holds one. */
  private readonly subscribers = new Map<Writer, string | null>();
  private heartbeat: ReturnType<typeof setInterval> | undefined;

  /** @param heartbeatMs keepalive period; clients are promised a comment at least every 15 s (docs/api.md). */
  constructor(
    private readonly heartbeatMs: number,
    private readonly leases?: LeaseHooks,
  ) {}

  get size(): number {
    return this.subscribers.size;
  }

  /** A stream that starts with `replay` and, unless the job is `finished`, stays subscribed. */
  open(replay: LoggedEvent[], finished: boolean, lease: string | null = null): Response {
    const { readable, writable } = new TransformStream<Uint8Array, Uint8Array>();
    const writer = writable.getWriter();
    // The whole replay as one chunk: a long log must not count against the slow-reader limit.
    this.send(writer, encoder.encode(RETRY_FIELD + replay.map(sseFrame).join("")));
    if (finished) {
      writer.close().catch(() => {});
      if (lease !== null) this.leases?.release([lease]);
    } else {
      this.subscribers.set(writer, lease);
      this.startHeartbeat();
    }
    return new Response(readable, { headers: SSE_HEADERS });
  }

  /** Fan `events` out to every subscriber; after the terminal event, close every stream. */
  publish(events: LoggedEvent[], finished: boolean): void {
    if (events.length > 0) {
      const chunk = encoder.encode(events.map(sseFrame).join(""));
      for (const writer of this.subscribers.keys()) this.send(writer, chunk);
    }
    if (finished) {
      for (const writer of this.subscribers.keys()) writer.close().catch(() => {});
      this.leases?.release(leasesOf(this.subscribers.values()));
      this.subscribers.clear();
      this.stopHeartbeat();
    }
  }

  private send(writer: Writer, chunk: Uint8Array): void {
    const queued = writer.desiredSize === null ? Number.POSITIVE_INFINITY : -writer.desiredSize;
    if (queued > MAX_QUEUED_CHUNKS) {
      this.drop(writer);
      return;
    }
    writer.write(chunk).catch(() => this.drop(writer));
  }

  private drop(writer: Writer): void {
    const lease = this.subscribers.get(writer);
    if (!this.subscribers.delete(writer)) return;
    if (lease) this.leases?.release([lease]);
    writer.abort("subscriber dropped").catch(() => {});
    if (this.subscribers.size === 0) this.stopHeartbeat();
  }

  private startHeartbeat(): void {
    this.heartbeat ??= setInterval(() => {
      for (const writer of this.subscribers.keys()) this.send(writer, KEEPALIVE);
      this.leases?.renew(leasesOf(this.subscribers.values()));
    }, this.heartbeatMs);
  }

  private stopHeartbeat(): void {
    if (this.heartbeat !== undefined) clearInterval(this.heartbeat);
    this.heartbeat = undefined;
  }
}

function leasesOf(values: Iterable<string | null>): string[] {
  const out: string[] = [];
  for (const v of values) if (v !== null) out.push(v);
  return out;
}
