/**
 * A small Server-Sent Events reader over fetch, one connection, raw: every event with its id and
 * type as the server sent it, comment lines (heartbeats) reported separately. For the tests and
 * the load generator, which verify the stream itself; an application wants the typed client's
 * resuming `events()` (src/client/events.ts) instead.
 * The parsing is eventsource-parser's (the WHATWG rules: CR/LF/CRLF, BOM, multi-line data).
 */
import { createParser } from "eventsource-parser";
import { SSE_FINISHED_STATUS } from "../../src/contracts/sse";

export interface SseEvent {
  id: string | null;
  event: string;
  data: string;
}

export interface SseOptions {
  headers?: Record<string, string>;
  signal?: AbortSignal;
  onComment?: (text: string) => void;
  /** Called once the response's head arrived (status and headers), before any event is read. */
  onOpen?: (res: Response) => void;
  /** Defaults to the global fetch (the load tool gives each virtual user a connection pool of its own). */
  fetch?: typeof fetch;
}

export async function* readSse(url: string, opts: SseOptions = {}): AsyncGenerator<SseEvent> {
  const res = await (opts.fetch ?? fetch)(url, {
    headers: { accept: "text/event-stream", ...opts.headers },
    signal: opts.signal,
  });
  opts.onOpen?.(res);
  // The job is finished and nothing is after the cursor (SSE_FINISHED_STATUS): an empty stream.
  if (res.status === SSE_FINISHED_STATUS) return;
  if (!res.ok || !res.body) {
    const text = await res.text().catch(() => "");
    throw new SseHttpError(res.status, text);
  }
  const parsed: SseEvent[] = [];
  const parser = createParser({
    onEvent: (e) => parsed.push({ id: e.id ?? null, event: e.event ?? "message", data: e.data }),
    onComment: (text) => opts.onComment?.(text.trim()),
  });
  const decoder = new TextDecoder();
  for await (const chunk of res.body as unknown as AsyncIterable<Uint8Array>) {
    parser.feed(decoder.decode(chunk, { stream: true }));
    // Events parsed from this chunk, in order; the parser is synchronous, so none is pending.
    while (parsed.length > 0) yield parsed.shift() as SseEvent;
  }
}

export class SseHttpError extends Error {
  constructor(
    readonly status: number,
    readonly body: string,
  ) {
    super(`SSE request failed with HTTP ${status}: ${body.slice(0, 300)}`);
    this.name = "SseHttpError";
  }
}
