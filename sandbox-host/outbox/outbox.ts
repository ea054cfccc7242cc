/**
 * The event outbox: per execution, events get `seq` from 1 and stay here until the gateway's
 * ingest route acknowledges them (`acked_seq`, contiguous from 1). Delivery is at-least-once;
 * the projector drops duplicates by (execution_id, seq) and only appends contiguous seqs, so a
 * batch always restarts at `acked_seq + 1` and each execution has at most one batch in flight
 * (keeps order without the projector having to buffer).
 *
 * Requests are per host, not per execution: every stream that is due goes into one signed
 * request (`{batches: [...]}`), and the gateway fans it out to the jobs' objects. A host with 100
 * running jobs therefore sends one request per flush instead of 100, which is what keeps the
 * gateway (and everything behind it, like a cancel) responsive under load. A few requests may be
 * in flight at once, each carrying different executions; a stream's result (ack, permanent
 * rejection, or retry with its own backoff) never affects the other streams in the request.
 *
 * Events produced while we owned the execution stay valid after we lose it, so they keep being
 * delivered; the runner is what stops producing new ones.
 */
import {
  capEventPayload,
  type EventEnvelope,
  type EventPayload,
  type EventType,
  type IngestAck,
  type IngestMultiResult,
  MAX_EVENT_PAYLOAD_BYTES,
} from "../../src/contracts/events";

import { storable } from "../../src/contracts/text";
import { settlesWithin } from "../../src/domain/async";
import { backoffDelay } from "../../src/domain/backoff";
import type { ExecutionRef } from "../../src/domain/identity";
import { signedHeaders } from "../../src/domain/signing";
import { errorFields, type Logger } from "../log";
import { hostBatchMac, ingestKeyBytes } from "./batch-mac";

export interface OutboxOptions {
  gatewayUrl: string;
  signingSecret: string;
  log: Logger;
  fetch?: typeof fetch;
  /** Called with the total number of unacknowledged events whenever it changes. */
  onBacklog?: (backlog: number) => void;
  /** Batching window: a model stream emits ~every 5-30 ms, 10 ms makes most batches hold a few events. */
  flushDelayMs?: number;
  /** Flush at once when one execution has this many events waiting; also the most one batch carries. */
  maxBatch?: number;
  /** The most events one request carries across all its executions (default 2000). */
  maxRequestEvents?: number;
  /**
   * Requests in flight at once, each with different executions (default 2). Few on purpose: while
   * one is in flight new events gather and the next request carries them all, so under load the
   * request rate stays ~2 per round trip however many runs the host holds.
   */
  maxInFlight?: number;
  retry?: { baseMs: number; maxMs: number };
  requestTimeoutMs?: number;
}

// One identity type for claims and executions: src/domain/identity.ts.
export type { ExecutionRef };

/**
 * Statuses that say "this batch will never be accepted": retrying cannot help. 403 is the gateway
 * refusing the batch's ownership (unknown execution, wrong epoch, bad mac).
 */
const PERMANENT_REJECTIONS = new Set([400, 403, 409, 410, 413, 422]);

/** Bytes a request may carry: the gateway takes 1 MiB; stay well under it. */
const MAX_REQUEST_BYTES = 512 * 1024;
/** A batch's JSON around its events: job id, mac and punctuation (well under this). */
const BATCH_FRAME_BYTES = 200;
/** An event's JSON around its payload: ids, epoch, seq, type, timestamp (well under this). */
const ENVELOPE_BYTES = 300;
/**
 * The most characters of answer text one `model.delta` carries. A character is at most 6 bytes
 * of JSON (`\u0001`; a BMP character is 3 of UTF-8), so a piece always fits an event.
 */
const DELTA_PIECE_CHARS = Math.floor((MAX_EVENT_PAYLOAD_BYTES - 64) / 6);
/**
 * A `model.delta` emitted while the execution's previous event is a `model.delta` that no request
 * has carried yet joins that event (same seq, text appended) up to this many characters: under
 * load, while a batch is in flight, a job's deltas collapse into one event per round trip instead
 * of one each, at no added wait (docs/events.md, "Delta coalescing").
 */
export const MERGED_DELTA_MAX_CHARS = 4096;

/** One execution's batch in a request, with its events' JSON as it goes on the wire. */
interface Part {
  stream: ExecutionOutbox;
  events: EventEnvelope[];
  /** `JSON.stringify(events)`, serialized once: the mac covers exactly these bytes. */
  eventsJson: string;
}

export class Outbox {
  private readonly streams = new Map<string, ExecutionOutbox>();
  private backlog = 0;
  private drainWaiters: Array<() => void> = [];
  private inFlight = 0;
  private timer: NodeJS.Timeout | undefined;
  private timerDue = Number.POSITIVE_INFINITY;
  private closed = false;
  readonly ingestUrl: URL;

  constructor(readonly opts: OutboxOptions) {
    this.ingestUrl = new URL(`${opts.gatewayUrl.replace(/\/+$/, "")}/internal/events`);
  }

  /** Start the outbox of one execution. */
  open(ref: ExecutionRef): ExecutionOutbox {
    const stream = new ExecutionOutbox(ref, this);
    this.streams.set(ref.executionId, stream);
    return stream;
  }

  /** Unacknowledged events across all executions. */
  get pendingEvents(): number {
    return this.backlog;
  }

  /** Resolves true once every stream is delivered, false when `timeoutMs` passes first. */
  async drain(timeoutMs: number): Promise<boolean> {
    this.schedule(0);
    if (this.streams.size === 0) return true;
    const drained = new Promise<void>((resolve) => this.drainWaiters.push(resolve));
    return settlesWithin(drained, timeoutMs);
  }

  /** Stop all timers; undelivered events are abandoned (call drain first). */
  close(): void {
    this.closed = true;
    clearTimeout(this.timer);
    for (const s of this.streams.values()) s.stop();
    this.streams.clear();
    this.resolveDrainIfEmpty();
  }

  /** @internal */
  adjustBacklog(delta: number): void {
    this.backlog += delta;
    this.opts.onBacklog?.(this.backlog);
  }

  /** @internal */
  forget(executionId: string): void {
    this.streams.delete(executionId);
    this.resolveDrainIfEmpty();
  }

  /** @internal Send whatever is due within `delayMs` (earlier requests win). */
  schedule(delayMs: number): void {
    if (this.closed) return;
    const due = Date.now() + delayMs;
    if (this.timer && this.timerDue <= due) return;
    clearTimeout(this.timer);
    this.timerDue = due;
    this.timer = setTimeout(
      () => {
        this.timer = undefined;
        this.timerDue = Number.POSITIVE_INFINITY;
        this.flush();
      },
      Math.max(0, delayMs),
    );
  }

  /** Start requests for every due stream, up to the in-flight bound. */
  private flush(): void {
    const { maxInFlight = 2, maxRequestEvents = 2000, maxBatch = 256 } = this.opts;
    while (!this.closed && this.inFlight < maxInFlight) {
      const now = Date.now();
      const parts: Part[] = [];
      const jobs = new Set<string>();
      let events = 0;
      let bytes = 0;
      let nextRetry = Number.POSITIVE_INFINITY;
      for (const stream of this.streams.values()) {
        if (!stream.hasPending || stream.sending) continue;
        if (stream.retryAt > now) {
          nextRetry = Math.min(nextRetry, stream.retryAt);
          continue;
        }
        // One batch per job in a request (a job's batch is one ordered unit at the gateway).
        if (jobs.has(stream.ref.jobId)) continue;
        const batch = stream.nextBatch(Math.min(maxBatch, maxRequestEvents - events), MAX_REQUEST_BYTES - bytes);
        // Serialized once: its size bounds the request, the mac covers it and the same text goes
        // into the body (the gateway's parse → stringify of it gives back the same bytes). Bytes,
        // not characters: 512 Ki characters of CJK text are 1.5 MiB, past the gateway's limit.
        const eventsJson = JSON.stringify(batch);
        const size = Buffer.byteLength(eventsJson) + BATCH_FRAME_BYTES;
        if (parts.length > 0 && (events + batch.length > maxRequestEvents || bytes + size > MAX_REQUEST_BYTES)) {
          break;
        }
        parts.push({ stream, events: batch, eventsJson });
        stream.markSent(batch);
        jobs.add(stream.ref.jobId);
        events += batch.length;
        bytes += size;
      }
      if (nextRetry < Number.POSITIVE_INFINITY) this.schedule(nextRetry - now);
      if (parts.length === 0) return;
      for (const p of parts) p.stream.sending = true;
      this.inFlight++;
      void this.send(parts).finally(() => {
        this.inFlight--;
        for (const p of parts) {
          p.stream.sending = false;
          p.stream.forgetIfDone();
        }
        // What arrived meanwhile goes out now: under load batches grow, they never queue up.
        if (this.hasDue()) this.schedule(0);
      });
    }
  }

  private hasDue(): boolean {
    for (const s of this.streams.values()) if (s.hasPending && !s.sending) return true;
    return false;
  }

  private async send(parts: Part[]): Promise<void> {
    let results: IngestMultiResult[];
    try {
      // The nonce is chosen first: every batch's mac covers it, and the request is signed with it.
      const nonce = crypto.randomUUID();
      const batches = await Promise.all(
        parts.map(async (p) => {
          const mac = hostBatchMac(await p.stream.ingestKey(), nonce, p.stream.ref.jobId, p.eventsJson);
          return `{"job_id":${JSON.stringify(p.stream.ref.jobId)},"events":${p.eventsJson},"mac":"${mac}"}`;
        }),
      );
      const body = `{"batches":[${batches.join(",")}]}`;
      results = await this.post(body, nonce, parts.length);
    } catch (err) {
      for (const p of parts) p.stream.onFailure(err, p.events);
      return;
    }
    parts.forEach((p, i) => {
      const r = results[i] as IngestMultiResult;
      if (r.status === 200) p.stream.onAck(r.ack, p.events);
      else if (PERMANENT_REJECTIONS.has(r.status)) p.stream.onRejected(r.status, JSON.stringify(r.error));
      else p.stream.onFailure(new Error(`ingest answered ${r.status} for this job: ${r.error.message}`), p.events);
    });
  }

  private async post(body: string, nonce: string, count: number): Promise<IngestMultiResult[]> {
    const { opts, ingestUrl } = this;
    const res = await (opts.fetch ?? fetch)(ingestUrl, {
      method: "POST",
      // The answer is a few hundred bytes of JSON: compressing it (workerd and Cloudflare do for
      // clients that accept gzip) costs both ends CPU on every flush and saves nothing.
      headers: {
        ...(await signedHeaders(opts.signingSecret, "POST", ingestUrl.pathname, body, nonce)),
        "accept-encoding": "identity",
      },
      body,
      signal: AbortSignal.timeout(opts.requestTimeoutMs ?? 10_000),
    });
    const text = await res.text();
    if (PERMANENT_REJECTIONS.has(res.status)) {
      // The whole request was refused (a shape our own code produced): every batch in it would
      // be refused again, so each stream drops its events — loudly.
      opts.log.error("ingest rejected a whole request for good", { status: res.status, body: text.slice(0, 500) });
      return Array.from({ length: count }, () => ({
        job_id: "",
        status: 400 as const,
        error: { code: "invalid_request", message: text.slice(0, 200) },
      }));
    }
    if (!res.ok) throw new Error(`ingest answered ${res.status}: ${text.slice(0, 200)}`);
    const parsed = JSON.parse(text) as { results?: IngestMultiResult[] };
    if (!Array.isArray(parsed.results) || parsed.results.length !== count) {
      throw new Error(`ingest answered without one result per batch: ${text.slice(0, 200)}`);
    }
    return parsed.results;
  }

  private resolveDrainIfEmpty(): void {
    if (this.streams.size > 0) return;
    const waiters = this.drainWaiters;
    this.drainWaiters = [];
    for (const w of waiters) w();
  }
}

export class ExecutionOutbox {
  private nextSeq = 1;
  private ackedSeq = 0;
  /** Unacknowledged events, in seq order. */
  private pending: EventEnvelope[] = [];
  /** Each pending event's JSON size (UTF-8 bytes), so a batch can be bounded by bytes. */
  private readonly sizes = new WeakMap<EventEnvelope, number>();
  /** @internal A batch of this execution is in a request right now. */
  sending = false;
  /** @internal Not before this time (ms) after a failed delivery. */
  retryAt = 0;
  private ended = false;
  private stopped = false;
  /** The highest seq any request carried: events up to it never change (joinDelta). */
  private sentThrough = 0;
  private attempt = 0;
  /** Derived once per execution, on first use. */
  private key: Promise<Buffer> | undefined;

  constructor(
    readonly ref: ExecutionRef,
    private readonly outbox: Outbox,
  ) {}

  /** @internal The execution's ingest key bytes (src/domain/signing.ts `ingestKeyHex`). */
  ingestKey(): Promise<Buffer> {
    this.key ??= ingestKeyBytes(this.ref.token, this.ref.executionId);
    return this.key;
  }

  get lastSeq(): number {
    return this.nextSeq - 1;
  }

  get acknowledged(): number {
    return this.ackedSeq;
  }

  /** @internal */
  get hasPending(): boolean {
    return !this.stopped && this.pending.length > 0;
  }

  emit<T extends EventType>(type: T, payload: EventPayload<T>): EventEnvelope {
    // Answer text is never cut: a delta bigger than an event may hold goes as several deltas.
    if (type === "model.delta") {
      const { text } = payload as EventPayload<"model.delta">;
      if (text.length > DELTA_PIECE_CHARS) {
        let last: EventEnvelope | undefined;
        for (let at = 0; at < text.length; ) {
          let end = Math.min(text.length, at + DELTA_PIECE_CHARS);
          if (end < text.length && /[\uD800-\uDBFF]/.test(text[end - 1] ?? "")) end--;
          last = this.emitOne(type, { ...payload, text: text.slice(at, end) } as EventPayload<T>);
          at = end;
        }
        return last as EventEnvelope;
      }
    }
    return this.emitOne(type, payload);
  }

  private emitOne<T extends EventType>(type: T, payload: EventPayload<T>): EventEnvelope {
    if (this.ended) throw new Error(`outbox of execution ${this.ref.executionId} is closed`);
    if (type === "model.delta") {
      const joined = this.joinDelta(payload as EventPayload<"model.delta">);
      if (joined) return joined;
    }
    // Model and tool text may hold what Postgres cannot store (the stream carries what the rows
    // do), and a tool's output may be bigger than any ingest request: cut, and marked as cut.
    const capped = capEventPayload(storable(payload));
    if (capped.truncatedFrom !== null) {
      this.outbox.opts.log.warn("event payload truncated to fit the event path", {
        job_id: this.ref.jobId,
        execution_id: this.ref.executionId,
        type,
        original_bytes: capped.truncatedFrom,
      });
    }
    // TypeScript cannot tie a generic `type` to its member of the union; EventPayload<T> does.
    const event = {
      job_id: this.ref.jobId,
      execution_id: this.ref.executionId,
      epoch: this.ref.epoch,
      seq: this.nextSeq++,
      type,
      payload: capped.payload,
      ts: new Date().toISOString(),
    } as EventEnvelope;
    this.pending.push(event);
    this.sizes.set(event, capped.bytes + ENVELOPE_BYTES);
    this.outbox.adjustBacklog(1);
    const { flushDelayMs = 10, maxBatch = 256 } = this.outbox.opts;
    this.outbox.schedule(this.pending.length >= maxBatch ? 0 : flushDelayMs);
    return event;
  }

  /**
   * Append a delta's text to the last pending event when that is a plain `model.delta` no request
   * ever carried (so what the gateway may hold for that seq never differs from what is resent),
   * within MERGED_DELTA_MAX_CHARS. Returns the event it joined, or undefined.
   */
  private joinDelta(payload: EventPayload<"model.delta">): EventEnvelope | undefined {
    const last = this.pending[this.pending.length - 1];
    if (last?.type !== "model.delta" || last.seq <= this.sentThrough) return undefined;
    if (Object.keys(payload).length !== 1 || Object.keys(last.payload).length !== 1) return undefined;
    const before = (last.payload as EventPayload<"model.delta">).text;
    const text = storable(payload).text;
    if (before.length + text.length > MERGED_DELTA_MAX_CHARS) return undefined;
    const merged = { text: before + text };
    (last as { payload: unknown }).payload = merged;
    this.sizes.set(last, Buffer.byteLength(JSON.stringify(merged)) + ENVELOPE_BYTES);
    return last;
  }

  /** @internal These events went into a request: none of them may change any more. */
  markSent(events: EventEnvelope[]): void {
    const top = events[events.length - 1]?.seq ?? 0;
    if (top > this.sentThrough) this.sentThrough = top;
  }

  /** No more events will be produced; the stream goes away once everything is acknowledged. */
  end(): void {
    this.ended = true;
    this.flushNow();
    this.forgetIfDone();
  }

  flushNow(): void {
    this.outbox.schedule(0);
  }

  /** @internal */
  stop(): void {
    this.stopped = true;
    this.outbox.adjustBacklog(-this.pending.length);
    this.pending = [];
  }

  /**
   * @internal The next batch: always from `acked_seq + 1`, at most `max` events and `maxBytes`
   * of JSON (at least one event: a payload is never bigger than a request, capEventPayload).
   */
  nextBatch(max: number, maxBytes = Number.POSITIVE_INFINITY): EventEnvelope[] {
    let n = 0;
    let bytes = 0;
    for (const event of this.pending) {
      const size = this.sizes.get(event) ?? 0;
      if (n >= Math.max(1, max) || (n > 0 && bytes + size > maxBytes)) break;
      bytes += size;
      n++;
    }
    return this.pending.slice(0, n);
  }

  /** @internal */
  forgetIfDone(): void {
    if (this.ended && this.pending.length === 0 && !this.sending) this.outbox.forget(this.ref.executionId);
  }

  /** @internal The gateway acknowledged (some of) a batch. */
  onAck(ack: IngestAck, sent: EventEnvelope[]): void {
    const before = this.ackedSeq;
    const lastSent = sent[sent.length - 1]?.seq ?? 0;
    this.acknowledge(ack.acked_seq);
    // A 2xx that did not move the ack (the projector holds a gap we can no longer see) is
    // retried with backoff like a failure, so it cannot become a hot loop.
    if (this.ackedSeq > before || this.ackedSeq >= lastSent) {
      this.attempt = 0;
      this.retryAt = 0;
    } else this.retryAt = Date.now() + this.nextBackoff();
  }

  /** @internal Delivery failed (network, timeout, busy object): retry with this stream's backoff. */
  onFailure(err: unknown, sent: EventEnvelope[]): void {
    const delay = this.nextBackoff();
    this.retryAt = Date.now() + delay;
    this.outbox.opts.log.warn("outbox delivery failed, will retry", {
      job_id: this.ref.jobId,
      execution_id: this.ref.executionId,
      attempt: this.attempt,
      retry_in_ms: delay,
      from_seq: sent[0]?.seq,
      ...errorFields(err),
    });
  }

  /** @internal This batch will never be accepted: drop this execution's undelivered events. */
  onRejected(status: number, body: string): void {
    this.outbox.opts.log.error("ingest rejected a batch for good; dropping this execution's undelivered events", {
      job_id: this.ref.jobId,
      execution_id: this.ref.executionId,
      status,
      body: body.slice(0, 500),
      dropped: this.pending.length,
    });
    this.outbox.adjustBacklog(-this.pending.length);
    this.pending = [];
  }

  private nextBackoff(): number {
    const { retry = { baseMs: 100, maxMs: 5000 } } = this.outbox.opts;
    // Never 0: a full-jitter draw of 0 ms would resend in the same tick.
    return Math.max(10, backoffDelay(this.attempt++, retry));
  }

  private acknowledge(ackedSeq: number): void {
    if (!Number.isInteger(ackedSeq) || ackedSeq <= this.ackedSeq) return;
    this.ackedSeq = Math.min(ackedSeq, this.lastSeq);
    let n = 0;
    while (n < this.pending.length && (this.pending[n]?.seq ?? 0) <= this.ackedSeq) n++;
    if (n > 0) {
      this.pending.splice(0, n);
      this.outbox.adjustBacklog(-n);
    }
  }
}
