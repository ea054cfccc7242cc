/**
 * Following a job's event stream (GET /v1/jobs/{id}/events) as an async iterator that survives
 * dropped connections, the way a spec-compliant EventSource does, plus what EventSource cannot:
 * it stops by itself at the job's terminal event.
 *
 * Resume rule: every event carries its offset as the SSE `id`; after a connection ends or breaks
 * without the terminal event, the next request sends `Last-Event-ID: <last id yielded>`, and the
 * server replays only what is after it. A frame cut mid-way is never dispatched (an event is
 * complete only at its blank line), so it is simply asked for again: no gap. An id at or below
 * the last one yielded is dropped: no duplicate, whatever the server resends.
 *
 * Reconnect timing is the server's (`retry:`, SSE_RETRY_MS), doubled per consecutive attempt
 * that brought no new event, up to MAX_BACKOFF_MS; a 429/503's Retry-After is honoured. A 204
 * means the job is finished and nothing is after the cursor: the iterator ends. Other 4xx
 * answers (401, 404, 410, …) are final and thrown as ApiClientError.
 */
import { createParser, type EventSourceMessage } from "eventsource-parser";
import type { EventEnvelope } from "../contracts/events";
import { stateOfTerminalEvent } from "../contracts/job-state";
import { SSE_FINISHED_STATUS, SSE_RETRY_MS } from "../contracts/sse";
import { ApiClientError, errorOf, type Transport } from "./http";

/** The envelope's types, for narrowing a streamed event by `type` (e.g. `EventOf<"model.turn">`). */
export type { EventEnvelope, EventOf, EventPayload, ModelTurnReason } from "../contracts/events";

/** One event of a job's stream: its offset (the SSE id) and the envelope. */
export interface StreamedEvent {
  id: number;
  event: EventEnvelope;
}

export interface FollowOptions {
  /** Start after this offset (0 = from the first event). */
  after?: number;
  signal?: AbortSignal;
  /** Give up after this many consecutive connections that brought no new event (default 20). */
  maxAttempts?: number;
  /** Called before every request, with the id it resumes after (0 on a fresh start). */
  onConnect?: (info: { attempt: number; lastEventId: number }) => void;
}

/** The longest wait between two reconnects of a stream that keeps failing. */
export const MAX_BACKOFF_MS = 30_000;
const DEFAULT_MAX_ATTEMPTS = 20;

/** Statuses worth retrying: the server is busy or away, the request itself was fine. */
const RETRYABLE = new Set([408, 429, 500, 502, 503, 504]);

export async function* followEvents(
  transport: Transport,
  jobId: string,
  opts: FollowOptions = {},
): AsyncGenerator<StreamedEvent, void, undefined> {
  let lastId = opts.after ?? 0;
  let retryMs = SSE_RETRY_MS;
  let fruitless = 0;
  const maxAttempts = opts.maxAttempts ?? DEFAULT_MAX_ATTEMPTS;
  let lastError: unknown;
  for (let attempt = 1; ; attempt++) {
    opts.signal?.throwIfAborted();
    if (fruitless >= maxAttempts) {
      throw new Error(`event stream of job ${jobId}: ${fruitless} connections in a row brought nothing new`, {
        cause: lastError,
      });
    }
    let waitMs = 0;
    const before = lastId;
    opts.onConnect?.({ attempt, lastEventId: lastId });
    try {
      const res = await transport.send("GET", `/v1/jobs/${encodeURIComponent(jobId)}/events`, {
        headers: { accept: "text/event-stream", ...(lastId > 0 ? { "last-event-id": String(lastId) } : {}) },
        signal: opts.signal,
      });
      if (res.status === SSE_FINISHED_STATUS) return;
      if (!res.ok || !res.body) {
        const error = await errorOf(res);
        if (!RETRYABLE.has(res.status)) throw error;
        lastError = error;
        waitMs = (error.retryAfterS ?? 0) * 1000;
      } else {
        const queue: EventSourceMessage[] = [];
        const parser = createParser({
          onEvent: (m) => queue.push(m),
          onRetry: (ms) => {
            retryMs = ms;
          },
        });
        const reader = res.body.getReader();
        const decoder = new TextDecoder();
        try {
          for (;;) {
            const { done, value } = await reader.read();
            if (done) break;
            parser.feed(decoder.decode(value, { stream: true }));
            while (queue.length > 0) {
              const m = queue.shift() as EventSourceMessage;
              const id = m.id === undefined ? Number.NaN : Number(m.id);
              if (!Number.isSafeInteger(id) || id <= lastId) continue;
              const event = JSON.parse(m.data) as EventEnvelope;
              lastId = id;
              yield { id, event };
              if (stateOfTerminalEvent(event.type) !== null) return;
            }
          }
        } catch (err) {
          if (opts.signal?.aborted) throw err;
          lastError = err; // the connection broke mid-stream: resume below
        } finally {
          reader.cancel().catch(() => {});
        }
      }
    } catch (err) {
      if (opts.signal?.aborted || err instanceof ApiClientError) throw err;
      lastError = err; // no answer at all (refused, reset): retry
    }
    fruitless = lastId > before ? 0 : fruitless + 1;
    const backoff = retryMs * 2 ** Math.max(0, fruitless - 1);
    await sleep(Math.max(waitMs, Math.min(backoff, MAX_BACKOFF_MS)), opts.signal);
  }
}

function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) return reject(signal.reason);
    const onAbort = () => {
      clearTimeout(timer);
      reject(signal?.reason);
    };
    const timer = setTimeout(() => {
      signal?.removeEventListener("abort", onAbort);
      resolve();
    }, ms);
    signal?.addEventListener("abort", onAbort, { once: true });
  });
}
