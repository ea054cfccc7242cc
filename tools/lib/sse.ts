/**
 * A small Server-Sent Events reader over fetch, for the demo, the tests and the load tool. It
 * yields every event with its id and type and reports comment lines (heartbeats) separately.
 */
export interface SseEvent {
  id: string | null;
  event: string;
  data: string;
}

export interface SseOptions {
  headers?: Record<string, string>;
  signal?: AbortSignal;
  onComment?: (text: string) => void;
}

export async function* readSse(url: string, opts: SseOptions = {}): AsyncGenerator<SseEvent> {
  const res = await fetch(url, { headers: { accept: "text/event-stream", ...opts.headers }, signal: opts.signal });
  if (!res.ok || !res.body) {
    const text = await res.text().catch(() => "");
    throw new SseHttpError(res.status, text);
  }
  const decoder = new TextDecoder();
  let buffer = "";
  let id: string | null = null;
  let event = "message";
  let data: string[] = [];
  for await (const chunk of res.body as unknown as AsyncIterable<Uint8Array>) {
    buffer += decoder.decode(chunk, { stream: true });
    let nl = buffer.indexOf("\n");
    while (nl !== -1) {
      const line = buffer.slice(0, nl).replace(/\r$/, "");
      buffer = buffer.slice(nl + 1);
      if (line === "") {
        if (data.length > 0) yield { id, event, data: data.join("\n") };
        id = null;
        event = "message";
        data = [];
      } else if (line.startsWith(":")) {
        opts.onComment?.(line.slice(1).trim());
      } else {
        const colon = line.indexOf(":");
        const field = colon === -1 ? line : line.slice(0, colon);
        const value = colon === -1 ? "" : line.slice(colon + 1).replace(/^ /, "");
        if (field === "id") id = value;
        else if (field === "event") event = value;
        else if (field === "data") data.push(value);
      }
      nl = buffer.indexOf("\n");
    }
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
