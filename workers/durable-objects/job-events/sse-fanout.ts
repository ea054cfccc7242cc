/**
 * The live half of the projector: Server-Sent Events subscribers of one job.
 *
 * A subscriber gets its replay and then every live event through one TransformStream writer.
 * The caller reads the replay and calls `open` in the same synchronous turn, so no ingest can
 * slip between the two (a Durable Object runs one turn at a time): no duplicate, no gap.
 * Writes are never awaited, so one slow reader cannot hold up the others; a reader that falls
 * more than MAX_QUEUED_CHUNKS publishes behind, or whose write fails (disconnected), is dropped
 * and can resume with Last-Event-ID.
 *
 * Cost per delivery: a publish encodes its events once, and every subscriber is handed the same
 * bytes. A subscriber whose stream still holds an unread chunk does not get another one: the
 * publish joins its backlog, and the whole backlog goes out as one write once the stream has
 * room. Each chunk costs the runtime a pump step, a hop to the gateway and a socket write per
 * subscriber, so a reader that falls behind under load catches up in few large writes instead
 * of one small write per publish (docs/events.md, "Fan-out").
 *
 * A subscriber may hold a stream lease (tenant-streams/stream-leases.ts): renewed at every keepalive while it
 * is subscribed, released when it is closed or dropped.
 */
import { SSE_RETRY_MS } from "../../../src/contracts/sse";
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

interface Subscriber {
  writer: Writer;
  /** Its stream lease, if it holds one. */
  lease: string | null;
  /** Publishes not yet handed to the stream, in order; the bytes are shared with every subscriber. */
  backlog: Uint8Array[];
  /** A flush of the backlog waits for the stream to have room. */
  flushing: boolean;
  /** Close the stream once the backlog is out (the job's terminal event was published). */
  closing: boolean;
  dropped: boolean;
}

/** What the fanout does with its subscribers' stream leases (none: the leases are not counted). */
export interface LeaseHooks {
  renew(leases: string[]): void;
  release(leases: string[]): void;
}

export class SseFanout {
  private readonly subscribers = new Set<Subscriber>();
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
    const sub: Subscriber = {
      writer: writable.getWriter(),
      lease,
      backlog: [],
      flushing: false,
      closing: false,
      dropped: false,
    };
    // The whole replay as one chunk: a long log must not count against the slow-reader limit.
    this.send(sub, encoder.encode(RETRY_FIELD + replay.map(sseFrame).join("")));
    if (finished) {
      this.close(sub);
      if (lease !== null) this.leases?.release([lease]);
    } else {
      this.subscribers.add(sub);
      this.startHeartbeat();
    }
    return new Response(readable, { headers: SSE_HEADERS });
  }

  /** Fan `events` out to every subscriber; after the terminal event, close every stream. */
  publish(events: LoggedEvent[], finished: boolean): void {
    if (events.length > 0) {
      const chunk = encoder.encode(events.map(sseFrame).join(""));
      for (const sub of this.subscribers) this.send(sub, chunk);
    }
    if (finished) {
      for (const sub of this.subscribers) this.close(sub);
      this.leases?.release(leasesOf(this.subscribers));
      this.subscribers.clear();
      this.stopHeartbeat();
    }
  }

  /** Write now if the stream has room, else join the backlog (cut off past MAX_QUEUED_CHUNKS). */
  private send(sub: Subscriber, chunk: Uint8Array): void {
    if (sub.dropped) return;
    const room = sub.writer.desiredSize;
    if (room === null) {
      this.drop(sub); // the stream errored: the reader is gone
      return;
    }
    if (sub.backlog.length === 0 && room > 0) {
      this.write(sub, chunk);
      return;
    }
    if (sub.backlog.length >= MAX_QUEUED_CHUNKS) {
      this.drop(sub);
      return;
    }
    sub.backlog.push(chunk);
    if (!sub.flushing) {
      sub.flushing = true;
      sub.writer.ready.then(
        () => this.flush(sub),
        () => this.drop(sub),
      );
    }
  }

  /** The stream has room: the whole backlog goes out as one chunk, in publish order. */
  private flush(sub: Subscriber): void {
    sub.flushing = false;
    if (sub.dropped) return;
    const parts = sub.backlog;
    sub.backlog = [];
    if (parts.length > 0) this.write(sub, concat(parts));
    if (sub.closing) sub.writer.close().catch(() => {});
  }

  private write(sub: Subscriber, chunk: Uint8Array): void {
    sub.writer.write(chunk).catch(() => this.drop(sub));
  }

  /** Close after whatever is still in the backlog (a closed writer takes no more writes). */
  private close(sub: Subscriber): void {
    sub.closing = true;
    if (!sub.flushing) sub.writer.close().catch(() => {});
  }

  private drop(sub: Subscriber): void {
    if (sub.dropped) return;
    sub.dropped = true;
    sub.backlog = [];
    if (!this.subscribers.delete(sub)) {
      // Already unsubscribed (closing after the terminal event): its lease was released then.
      sub.writer.abort("subscriber dropped").catch(() => {});
      return;
    }
    if (sub.lease) this.leases?.release([sub.lease]);
    sub.writer.abort("subscriber dropped").catch(() => {});
    if (this.subscribers.size === 0) this.stopHeartbeat();
  }

  private startHeartbeat(): void {
    this.heartbeat ??= setInterval(() => {
      for (const sub of this.subscribers) this.send(sub, KEEPALIVE);
      this.leases?.renew(leasesOf(this.subscribers));
    }, this.heartbeatMs);
  }

  private stopHeartbeat(): void {
    if (this.heartbeat !== undefined) clearInterval(this.heartbeat);
    this.heartbeat = undefined;
  }
}

function concat(parts: Uint8Array[]): Uint8Array {
  if (parts.length === 1) return parts[0] as Uint8Array;
  let size = 0;
  for (const p of parts) size += p.byteLength;
  const out = new Uint8Array(size);
  let at = 0;
  for (const p of parts) {
    out.set(p, at);
    at += p.byteLength;
  }
  return out;
}

function leasesOf(subs: Iterable<Subscriber>): string[] {
  const out: string[] = [];
  for (const s of subs) if (s.lease !== null) out.push(s.lease);
  return out;
}
