/**
 * The console's calls to the gateway that served it (same origin): REST with the credential in
 * the Authorization header, the SSE event stream read with fetch (so the header can be sent), and
 * the chat WebSocket. The credential lives in this module's memory only: never in storage, never
 * in a URL the server sees except the WebSocket upgrade, which cannot carry a header.
 */
import type { ServerFrame } from "../../src/contracts/chat";
import type { EventEnvelope } from "../../src/contracts/events";
import type { JobView, LatencyView } from "../../src/contracts/job";
import { type JobState, TERMINAL_EVENT_OF } from "../../src/contracts/job-state";
import type { OffsetEvent } from "./run";

export type { EventEnvelope, JobView, LatencyView, ServerFrame };

let credential: string | null = null;
const listeners = new Set<() => void>();

export function signedIn(): boolean {
  return credential !== null;
}
export function signIn(key: string): void {
  credential = key.trim();
  for (const l of listeners) l();
}
export function signOut(): void {
  credential = null;
  for (const l of listeners) l();
}
export function onSessionChange(l: () => void): () => void {
  listeners.add(l);
  return () => listeners.delete(l);
}

export class ApiFailure extends Error {
  constructor(
    readonly status: number,
    readonly code: string,
    message: string,
  ) {
    super(message);
  }
}

function headers(extra: Record<string, string> = {}): Record<string, string> {
  if (credential === null) throw new ApiFailure(401, "unauthorized", "not signed in");
  return { authorization: `Bearer ${credential}`, ...extra };
}

async function failure(res: Response): Promise<ApiFailure> {
  const body = (await res.json().catch(() => null)) as { error?: { code?: string; message?: string } } | null;
  const f = new ApiFailure(res.status, body?.error?.code ?? "http_error", body?.error?.message ?? `HTTP ${res.status}`);
  if (res.status === 401) signOut();
  return f;
}

async function call<T>(method: string, path: string, body?: unknown): Promise<T> {
  const res = await fetch(path, {
    method,
    headers: headers(body === undefined ? {} : { "content-type": "application/json" }),
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  if (!res.ok) throw await failure(res);
  return (await res.json()) as T;
}

export const api = {
  job: (id: string) => call<{ job: JobView }>("GET", `/v1/jobs/${encodeURIComponent(id)}`).then((r) => r.job),
  jobs: (q: { state?: JobState; limit?: number; cursor?: string }) => {
    const p = new URLSearchParams();
    if (q.state) p.set("state", q.state);
    if (q.limit) p.set("limit", String(q.limit));
    if (q.cursor) p.set("cursor", q.cursor);
    return call<{ jobs: JobView[]; next_cursor: string | null }>("GET", `/v1/jobs?${p}`);
  },
  cancel: (id: string) => call<{ status: string }>("POST", `/v1/jobs/${encodeURIComponent(id)}/cancel`),
  messages: (conversationId: string) =>
    call<{
      messages: Array<{ role: "user" | "assistant"; content: string; job_id: string; latency: LatencyView | null }>;
    }>("GET", `/v1/conversations/${encodeURIComponent(conversationId)}/messages`),
};

/**
 * A job's events from offset `after` + 1 over SSE, read with fetch so the Authorization header
 * goes along; reconnects with the last id after a dropped connection, and ends at the terminal
 * event (the server closes the stream after it). `signal` stops it.
 */
export async function streamJobEvents(
  jobId: string,
  onEvent: (e: OffsetEvent) => void,
  signal: AbortSignal,
  after = 0,
): Promise<void> {
  let last = after;
  for (let attempt = 0; !signal.aborted; attempt++) {
    let ended = false;
    try {
      const res = await fetch(`/v1/jobs/${encodeURIComponent(jobId)}/events`, {
        headers: headers(last > 0 ? { "last-event-id": String(last) } : {}),
        signal,
      });
      if (res.status === 204) return;
      if (!res.ok || !res.body) throw await failure(res);
      attempt = 0;
      const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
      let buf = "";
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buf += value;
        for (let cut = buf.search(/\r?\n\r?\n/); cut >= 0; cut = buf.search(/\r?\n\r?\n/)) {
          const frame = buf.slice(0, cut);
          buf = buf.slice(cut + (buf[cut] === "\r" ? 4 : 2));
          let id: number | null = null;
          let data = "";
          for (const line of frame.split(/\r?\n/)) {
            if (line.startsWith("id:")) id = Number(line.slice(3).trim());
            else if (line.startsWith("data:")) data += line.slice(line[5] === " " ? 6 : 5);
          }
          if (id === null || !data || id <= last) continue;
          last = id;
          const event = JSON.parse(data) as EventEnvelope;
          onEvent({ offset: id, event });
          if (isTerminal(event.type)) ended = true;
        }
      }
      if (ended) return;
    } catch (err) {
      if (signal.aborted) return;
      if (err instanceof ApiFailure && err.status < 500 && err.status !== 429) throw err;
    }
    await new Promise((r) => setTimeout(r, Math.min(5000, 250 * 2 ** attempt)));
  }
}

// From job-state.ts, not events.ts: that module builds zod schemas at load, which would put zod
// in the console's bundle for one list.
const TERMINAL: ReadonlySet<string> = new Set(Object.values(TERMINAL_EVENT_OF));
export const isTerminal = (type: string) => TERMINAL.has(type);

export type ChatStatus = "connecting" | "open" | "closed";

/**
 * The chat WebSocket of one conversation, reconnecting with backoff until closed. `onOpen` runs
 * after every (re)connect: the caller resumes the jobs it follows from their last offsets there.
 */
export class ChatSocket {
  private ws: WebSocket | null = null;
  private closed = false;
  private attempt = 0;

  constructor(
    private readonly conversationId: string,
    private readonly onFrame: (f: ServerFrame) => void,
    private readonly onStatus: (s: ChatStatus) => void,
    private readonly onOpen: () => void,
  ) {
    this.connect();
  }

  private connect(): void {
    if (this.closed || credential === null) return;
    this.onStatus("connecting");
    const scheme = location.protocol === "https:" ? "wss:" : "ws:";
    const url = `${scheme}//${location.host}/v1/conversations/${encodeURIComponent(this.conversationId)}/ws?token=${encodeURIComponent(credential)}`;
    const ws = new WebSocket(url);
    this.ws = ws;
    ws.onopen = () => {
      this.attempt = 0;
      this.onStatus("open");
      this.onOpen();
    };
    ws.onmessage = (m) => this.onFrame(JSON.parse(String(m.data)) as ServerFrame);
    ws.onclose = () => {
      if (this.ws !== ws) return;
      this.ws = null;
      this.onStatus("closed");
      if (this.closed) return;
      const delay = Math.min(5000, 250 * 2 ** this.attempt++);
      setTimeout(() => this.connect(), delay);
    };
  }

  send(frame: unknown): boolean {
    if (this.ws?.readyState !== WebSocket.OPEN) return false;
    this.ws.send(JSON.stringify(frame));
    return true;
  }

  /** Drop the connection as a network failure would (it reconnects). */
  drop(): void {
    this.ws?.close();
  }

  close(): void {
    this.closed = true;
    this.ws?.close();
    this.ws = null;
  }
}
