/**
 * The event outbox: per execution, events get `seq` from 1 and stay here until the gateway's
 * ingest route acknowledges them (`acked_seq`, contiguous from 1). Delivery is at-least-once;
 * the projector drops duplicates by (execution_id, seq) and only appends contiguous seqs, so a
 * batch always restarts at `acked_seq + 1` and there is at most one request in flight per
 * execution (keeps order without the projector having to buffer).
 *
 * Events produced while we owned the execution stay valid after we lose it, so they keep being
 * delivered; the runner is what stops producing new ones.
 */
import type { EventEnvelope, EventType, IngestAck } from "../../src/contracts/events";

import { backoffDelay } from "../../src/domain/backoff";
import { signedHeaders } from "../../src/domain/signing";
import { errorFields, type Logger } from "../log";

export interface OutboxOptions {
  gatewayUrl: string;
  signingSecret: string;
  log: Logger;
  fetch?: typeof fetch;
  /** Called with the total number of unacknowledged events whenever it changes. */
  onBacklog?: (backlog: number) => void;
  /** Batching window: a model stream emits ~every 5-30 ms, 10 ms makes most batches hold a few events. */
  flushDelayMs?: number;
  /** Flush at once when this many events wait; also the most one request carries. */
  maxBatch?: number;
  retry?: { baseMs: number; maxMs: number };
  requestTimeoutMs?: number;
}

export interface ExecutionRef {
  jobId: string;
  executionId: string;
  epoch: number;
}

/** Statuses that say "this batch will never be accepted": retrying cannot help. */
const PERMANENT_REJECTIONS = new Set([400, 409, 410, 413, 422]);

export class Outbox {
  private readonly streams = new Map<string, ExecutionOutbox>();
  private backlog = 0;
  private drainWaiters: Array<() => void> = [];
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
    for (const s of this.streams.values()) s.flushNow();
    if (this.streams.size === 0) return true;
    let timer: NodeJS.Timeout | undefined;
    const drained = new Promise<boolean>((resolve) => this.drainWaiters.push(() => resolve(true)));
    const timedOut = new Promise<boolean>((resolve) => {
      timer = setTimeout(() => resolve(false), timeoutMs);
    });
    const result = await Promise.race([drained, timedOut]);
    clearTimeout(timer);
    return result;
  }

  /** Stop all timers; undelivered events are abandoned (call drain first). */
  close(): void {
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
  private sending = false;
  private ended = false;
  private stopped = false;
  private attempt = 0;
  private timer: NodeJS.Timeout | undefined;
  private timerDue = Number.POSITIVE_INFINITY;

  constructor(
    readonly ref: ExecutionRef,
    private readonly outbox: Outbox,
  ) {}

  get lastSeq(): number {
    return this.nextSeq - 1;
  }

  get acknowledged(): number {
    return this.ackedSeq;
  }

  emit(type: EventType, payload: Record<string, unknown>): EventEnvelope {
    if (this.ended) throw new Error(`outbox of execution ${this.ref.executionId} is closed`);
    const event: EventEnvelope = {
      job_id: this.ref.jobId,
      execution_id: this.ref.executionId,
      epoch: this.ref.epoch,
      seq: this.nextSeq++,
      type,
      payload,
      ts: new Date().toISOString(),
    };
    this.pending.push(event);
    this.outbox.adjustBacklog(1);
    const { flushDelayMs = 10, maxBatch = 256 } = this.outbox.opts;
    this.schedule(this.pending.length >= maxBatch ? 0 : flushDelayMs);
    return event;
  }

  /** No more events will be produced; the stream goes away once everything is acknowledged. */
  end(): void {
    this.ended = true;
    this.flushNow();
    this.forgetIfDone();
  }

  flushNow(): void {
    this.schedule(0);
  }

  /** @internal */
  stop(): void {
    this.stopped = true;
    clearTimeout(this.timer);
    this.outbox.adjustBacklog(-this.pending.length);
    this.pending = [];
  }

  private schedule(delayMs: number): void {
    if (this.stopped || this.sending || this.pending.length === 0) return;
    const due = Date.now() + delayMs;
    if (this.timer && this.timerDue <= due) return;
    clearTimeout(this.timer);
    this.timerDue = due;
    this.timer = setTimeout(() => {
      this.timer = undefined;
      this.timerDue = Number.POSITIVE_INFINITY;
      void this.send();
    }, delayMs);
  }

  private forgetIfDone(): void {
    if (this.ended && this.pending.length === 0 && !this.sending) this.outbox.forget(this.ref.executionId);
  }

  private async send(): Promise<void> {
    if (this.stopped || this.sending || this.pending.length === 0) return;
    this.sending = true;
    const { opts } = this.outbox;
    const batch = this.pending.slice(0, opts.maxBatch ?? 256);
    const lastSent = batch[batch.length - 1]?.seq ?? 0;
    let retryDelay: number | null = null;
    try {
      const ack = await this.post(batch);
      if (ack === "rejected") {
        this.dropAll();
      } else {
        const before = this.ackedSeq;
        this.acknowledge(ack.acked_seq);
        // A 2xx that did not move the ack (the projector holds a gap we can no longer see)
        // is retried with backoff like a failure, so it cannot become a hot loop.
        if (this.ackedSeq > before || this.ackedSeq >= lastSent) this.attempt = 0;
        else retryDelay = this.nextBackoff();
      }
    } catch (err) {
      retryDelay = this.nextBackoff();
      opts.log.warn("outbox delivery failed, will retry", {
        job_id: this.ref.jobId,
        execution_id: this.ref.executionId,
        attempt: this.attempt,
        retry_in_ms: retryDelay,
        from_seq: batch[0]?.seq,
        ...errorFields(err),
      });
    } finally {
      this.sending = false;
    }
    if (this.stopped) return;
    if (this.pending.length > 0) this.schedule(retryDelay ?? 0);
    this.forgetIfDone();
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

  private dropAll(): void {
    this.outbox.adjustBacklog(-this.pending.length);
    this.pending = [];
  }

  private async post(events: EventEnvelope[]): Promise<IngestAck | "rejected"> {
    const { opts, ingestUrl } = this.outbox;
    const body = JSON.stringify({ job_id: this.ref.jobId, events });
    const res = await (opts.fetch ?? fetch)(ingestUrl, {
      method: "POST",
      headers: await signedHeaders(opts.signingSecret, "POST", ingestUrl.pathname, body),
      body,
      signal: AbortSignal.timeout(opts.requestTimeoutMs ?? 10_000),
    });
    const text = await res.text();
    if (PERMANENT_REJECTIONS.has(res.status)) {
      opts.log.error("ingest rejected a batch for good; dropping this execution's undelivered events", {
        job_id: this.ref.jobId,
        execution_id: this.ref.executionId,
        status: res.status,
        body: text.slice(0, 500),
        dropped: this.pending.length,
      });
      return "rejected";
    }
    if (!res.ok) throw new Error(`ingest answered ${res.status}: ${text.slice(0, 200)}`);
    const ack = JSON.parse(text) as Partial<IngestAck>;
    if (typeof ack.acked_seq !== "number") throw new Error(`ingest answered without acked_seq: ${text.slice(0, 200)}`);
    return ack as IngestAck;
  }
}
