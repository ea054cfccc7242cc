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
 *
 * A whole tree (`?include=descendants`) follows the same rules with its composite cursor as the
 * id (`t1.…`, src/contracts/sse.ts): it resumes with the last cursor yielded, drops a frame
 * whose own job's offset in its cursor is at or below the one already yielded for that job, and
 * stops once every job its cursor holds has delivered its terminal event (or at the 204).
 */
import { createParser, type EventSourceMessage } from "eventsource-parser";
import type { EventEnvelope } from "../contracts/events";
import { stateOfTerminalEvent } from "../contracts/job-state";
import { decodeTreeCursor, SSE_FINISHED_STATUS, SSE_RETRY_MS, type TreeCursor } from "../contracts/sse";
import { ApiClientError, errorOf, type Transport } from "./http";

/** The envelope's types, for narrowing a streamed event by `type` (e.g. `EventOf<"model.turn">`). */
export type { EventEnvelope, EventOf, EventPayload, ModelTurnReason } from "../contracts/events";

/** One event of a job's stream: its offset (the SSE id) and the envelope. */
export interface StreamedEvent {
  id: number;
  event: EventEnvelope;
}

/** One event of a tree stream: the composite cursor after it (the SSE id) and that job's envelope (`event.job_id`). */
export interface TreeStreamedEvent {
  id: string;
  event: EventEnvelope;
}

interface CommonFollowOptions {
  signal?: AbortSignal;
  /** Give up after this many consecutive connections that brought no new event (default 20). */
  maxAttempts?: number;
}

export interface FollowOptions extends CommonFollowOptions {
  descendants?: false;
  /** Start after this offset (0 = from the first event). */
  after?: number;
  /** Called before every request, with the id it resumes after (0 on a fresh start). */
  onConnect?: (info: { attempt: number; lastEventId: number }) => void;
}

export interface TreeFollowOptions extends CommonFollowOptions {
  /** The job and every descendant its delegate calls created, in one stream. */
  descendants: true;
  /** Start after this composite cursor (an `id` this stream yielded; "" = from the start). */
  after?: string;
  /** Called before every request, with the cursor it resumes after ("" on a fresh start). */
  onConnect?: (info: { attempt: number; lastEventId: string }) => void;
}

/** The longest wait between two reconnects of a stream that keeps failing. */
export const MAX_BACKOFF_MS = 30_000;
const DEFAULT_MAX_ATTEMPTS = 20;

/** Statuses worth retrying: the server is busy or away, the request itself was fine. */
const RETRYABLE = new Set([408, 429, 500, 502, 503, 504]);

/** What a stream's ids mean: where to resume, which frames are new, when nothing more can come. */
interface Cursor<Id> {
  last: Id;
  /** The Last-Event-ID to send, or undefined at the start. */
  header(): string | undefined;
  /** A frame's id and envelope: its id when it is new (and now the cursor), null to drop it. */
  accept(rawId: string | undefined, event: EventEnvelope): Id | null;
  /** True once the stream delivered everything it can. */
  done(): boolean;
}

function jobCursor(after: number): Cursor<number> {
  let finished = false;
  return {
    last: after,
    header() {
      return this.last > 0 ? String(this.last) : undefined;
    },
    accept(rawId, event) {
      const id = rawId === undefined ? Number.NaN : Number(rawId);
      if (!Number.isSafeInteger(id) || id <= this.last) return null;
      this.last = id;
      finished = stateOfTerminalEvent(event.type) !== null;
      return id;
    },
    done: () => finished,
  };
}

function treeCursor(after: string): Cursor<string> {
  /** Per job, the highest offset yielded. */
  const seen: TreeCursor = { ...(decodeTreeCursor(after) ?? {}) };
  let jobs: string[] = Object.keys(seen);
  const finished = new Set<string>();
  return {
    last: after,
    header() {
      return this.last !== "" ? this.last : undefined;
    },
    accept(rawId, event) {
      const cursor = rawId === undefined ? null : decodeTreeCursor(rawId);
      const offset = cursor?.[event.job_id];
      if (!cursor || offset === undefined || offset <= (seen[event.job_id] ?? 0)) return null;
      seen[event.job_id] = offset;
      jobs = Object.keys(cursor);
      if (stateOfTerminalEvent(event.type) !== null) finished.add(event.job_id);
      this.last = rawId as string;
      return this.last;
    },
    // An announced child is in the cursor (at 0) before its first event, so it is waited for.
    done: () => jobs.length > 0 && jobs.every((j) => finished.has(j)),
  };
}

export function followEvents(
  transport: Transport,
  jobId: string,
  opts: FollowOptions = {},
): AsyncGenerator<StreamedEvent, void, undefined> {
  return follow(transport, jobId, "", jobCursor(opts.after ?? 0), opts);
}

export function followTreeEvents(
  transport: Transport,
  jobId: string,
  opts: TreeFollowOptions,
): AsyncGenerator<TreeStreamedEvent, void, undefined> {
  return follow(transport, jobId, "?include=descendants", treeCursor(opts.after ?? ""), opts);
}

async function* follow<Id>(
  transport: Transport,
  jobId: string,
  query: string,
  cursor: Cursor<Id>,
  opts: CommonFollowOptions & { onConnect?: (info: { attempt: number; lastEventId: Id }) => void },
): AsyncGenerator<{ id: Id; event: EventEnvelope }, void, undefined> {
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
    const before = cursor.last;
    opts.onConnect?.({ attempt, lastEventId: cursor.last });
    try {
      const resume = cursor.header();
      const res = await transport.send("GET", `/v1/jobs/${encodeURIComponent(jobId)}/events${query}`, {
        headers: { accept: "text/event-stream", ...(resume !== undefined ? { "last-event-id": resume } : {}) },
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
              const event = JSON.parse(m.data) as EventEnvelope;
              const id = cursor.accept(m.id, event);
              if (id === null) continue;
              yield { id, event };
              if (cursor.done()) return;
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
    fruitless = cursor.last !== before ? 0 : fruitless + 1;
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
