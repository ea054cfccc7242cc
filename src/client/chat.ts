/**
 * A conversation over the chat WebSocket (GET /v1/conversations/{id}/ws, docs/api.md) that
 * survives dropped connections without duplicated or missing text.
 *
 * What it remembers to make a reconnect seamless: per followed job, the highest event offset it
 * has delivered (an `event` frame at or below it is dropped: no duplicate); on every new socket
 * it first sends `resume {job_id, after}` for each job not yet finished (the server replays from
 * there: no gap), then resends every `message` not yet answered by a `job` or `error` frame
 * (the server dedupes by `client_message_id`, so a message is never submitted twice).
 *
 * The socket authenticates with `?access_token=` (a browser cannot set headers on a WebSocket):
 * a token the caller's credential already is, or, when the credential is an API key, a
 * conversation-bound write token minted for each connection (POST /v1/tokens), so the key never
 * travels in a URL.
 */
import type { ClientFrame, MultitaskPolicy, ServerFrame } from "../contracts/chat";
import { stateOfTerminalEvent } from "../contracts/job-state";
import { SSE_RETRY_MS } from "../contracts/sse";
import { MAX_BACKOFF_MS } from "./events";

/** The part of the WHATWG WebSocket the client uses (browsers, Node ≥ 22, Deno, Workers, the `ws` package). */
export interface WebSocketLike {
  readonly readyState: number;
  send(data: string): void;
  close(code?: number, reason?: string): void;
  addEventListener(type: "open" | "close" | "error", listener: () => void): void;
  addEventListener(type: "message", listener: (ev: { data: unknown }) => void): void;
}
export type WebSocketConstructor = new (url: string) => WebSocketLike;

export type ChatStatus = "connecting" | "open" | "reconnecting" | "closed";

export interface ChatOptions {
  /** The connection's default busy-conversation policy (default `queue`). */
  multitask?: MultitaskPolicy;
  /** The agent (`name` or `name@N`) the connection's messages run when a message names none (`?agent=`). */
  agent?: string;
  /** Closes the connection for good. */
  signal?: AbortSignal;
  /** Give up after this many consecutive connections that never opened (default 20). */
  maxAttempts?: number;
}

const OPEN = 1;
const DEFAULT_MAX_ATTEMPTS = 20;

type Listener<T> = (value: T) => void;

export class ChatConnection {
  private socket: WebSocketLike | null = null;
  private currentStatus: ChatStatus = "connecting";
  /** Job id → highest event offset delivered, for every job followed. */
  private readonly cursors = new Map<string, number>();
  /** Followed jobs whose terminal event was delivered: never resumed, their late frames dropped. */
  private readonly finished = new Set<string>();
  /** Messages sent and not yet answered, by client_message_id, in send order. */
  private readonly unanswered = new Map<string, Extract<ClientFrame, { type: "message" }>>();
  /**
   * Messages sent again on a new socket. The server answers a repeated client_message_id with the
   * job to the sender alone and does not make that socket follow it, so its `job` frame is
   * followed by a `resume`.
   */
  private readonly resent = new Set<string>();
  /** Messages that went out on some socket (a message queued before the first open has not). */
  private readonly sentOnce = new Set<string>();
  /** Cancel and resume frames waiting for an open socket. */
  private readonly outbox: ClientFrame[] = [];
  private readonly frameListeners = new Set<Listener<ServerFrame>>();
  private readonly statusListeners = new Set<Listener<ChatStatus>>();
  private failedAttempts = 0;
  private lastError: unknown;
  private messageCounter = 0;

  /** @param url called before every connection attempt: the socket URL with its access token. */
  constructor(
    private readonly url: () => Promise<string>,
    private readonly WebSocketImpl: WebSocketConstructor,
    private readonly opts: ChatOptions = {},
  ) {
    opts.signal?.addEventListener("abort", () => this.close(), { once: true });
    void this.connect();
  }

  get status(): ChatStatus {
    return this.currentStatus;
  }

  /** Why the connection closed for good, when it was not `close()`. */
  get error(): unknown {
    return this.lastError;
  }

  /** Every server frame, in order, with duplicate `event` frames already dropped. Returns an unsubscribe. */
  onFrame(listener: Listener<ServerFrame>): () => void {
    this.frameListeners.add(listener);
    return () => this.frameListeners.delete(listener);
  }

  onStatus(listener: Listener<ChatStatus>): () => void {
    this.statusListeners.add(listener);
    return () => this.statusListeners.delete(listener);
  }

  /**
   * Send a user message; returns its client_message_id (generated unless given). Sent now if the
   * socket is open, else on the next one; resent after a reconnect until the server answers it.
   */
  send(
    content: string,
    opts: { client_message_id?: string; multitask?: MultitaskPolicy; agent?: string } = {},
  ): string {
    const id = opts.client_message_id ?? `m-${Date.now().toString(36)}-${(this.messageCounter++).toString(36)}`;
    const frame: ClientFrame = {
      type: "message",
      content,
      client_message_id: id,
      ...(opts.multitask ? { multitask: opts.multitask } : {}),
      ...(opts.agent ? { agent: opts.agent } : {}),
    };
    this.unanswered.set(id, frame);
    this.transmit(frame);
    return id;
  }

  cancel(jobId: string): void {
    this.transmit({ type: "cancel", job_id: jobId });
  }

  /** Follow a job of this conversation from `after` (0 = its first event); it is resumed again after any reconnect. */
  resume(jobId: string, after = 0): void {
    this.finished.delete(jobId);
    this.cursors.set(jobId, Math.max(after, this.cursors.get(jobId) ?? 0));
    this.transmit({ type: "resume", job_id: jobId, after: this.cursors.get(jobId) ?? after });
  }

  close(): void {
    if (this.currentStatus === "closed") return;
    this.setStatus("closed");
    this.socket?.close(1000, "client closed");
    this.socket = null;
    for (const waiter of this.waiters.splice(0)) waiter({ done: true, value: undefined });
  }

  /** The frames as an async iterator (ends when the connection closes). */
  frames(): AsyncIterableIterator<ServerFrame> {
    const queued: ServerFrame[] = [];
    const unsubscribe = this.onFrame((f) => {
      const waiter = this.waiters.shift();
      if (waiter) waiter({ done: false, value: f });
      else queued.push(f);
    });
    const iterator: AsyncIterableIterator<ServerFrame> = {
      next: () => {
        const f = queued.shift();
        if (f) return Promise.resolve({ done: false, value: f });
        if (this.currentStatus === "closed") return Promise.resolve({ done: true, value: undefined });
        return new Promise((resolve) => this.waiters.push(resolve));
      },
      return: () => {
        unsubscribe();
        return Promise.resolve({ done: true, value: undefined });
      },
      [Symbol.asyncIterator]: () => iterator,
    };
    return iterator;
  }

  private readonly waiters: Array<(r: IteratorResult<ServerFrame>) => void> = [];

  private setStatus(status: ChatStatus): void {
    if (this.currentStatus === status) return;
    this.currentStatus = status;
    for (const l of this.statusListeners) l(status);
  }

  private transmit(frame: ClientFrame): void {
    if (this.socket?.readyState === OPEN && this.currentStatus === "open") {
      this.socket.send(JSON.stringify(frame));
      if (frame.type === "message") this.sentOnce.add(frame.client_message_id);
    } else if (frame.type !== "message") this.outbox.push(frame); // messages are resent from `unanswered`
  }

  private async connect(): Promise<void> {
    if (this.currentStatus === "closed") return;
    let url: string;
    try {
      url = await this.url();
    } catch (err) {
      this.lastError = err;
      return this.retry();
    }
    // close() may have run while the URL was awaited.
    if (this.status === "closed") return;
    const ws = new this.WebSocketImpl(url);
    this.socket = ws;
    let opened = false;
    ws.addEventListener("open", () => {
      if (this.socket !== ws) return;
      opened = true;
      this.failedAttempts = 0;
      this.setStatus("open");
      // Resume first, so replays are ordered before anything the messages start.
      for (const [jobId, after] of this.cursors) {
        if (!this.finished.has(jobId)) ws.send(JSON.stringify({ type: "resume", job_id: jobId, after }));
      }
      for (const frame of this.outbox.splice(0)) {
        if (frame.type !== "resume") ws.send(JSON.stringify(frame));
      }
      for (const frame of this.unanswered.values()) {
        if (this.sentOnce.has(frame.client_message_id)) this.resent.add(frame.client_message_id);
        this.sentOnce.add(frame.client_message_id);
        ws.send(JSON.stringify(frame));
      }
    });
    ws.addEventListener("message", (ev) => {
      if (this.socket !== ws || typeof ev.data !== "string") return;
      let frame: ServerFrame;
      try {
        frame = JSON.parse(ev.data) as ServerFrame;
      } catch {
        return;
      }
      if (this.accept(frame)) for (const l of this.frameListeners) l(frame);
    });
    const lost = () => {
      if (this.socket !== ws) return;
      this.socket = null;
      if (!opened) this.failedAttempts++;
      this.retry();
    };
    ws.addEventListener("close", lost);
    ws.addEventListener("error", lost);
  }

  /** Updates the resume state; false for a duplicate event frame. */
  private accept(frame: ServerFrame): boolean {
    if (frame.type === "event") {
      const jobId = frame.event.job_id;
      if (this.finished.has(jobId) || frame.offset <= (this.cursors.get(jobId) ?? 0)) return false;
      this.cursors.set(jobId, frame.offset);
      if (stateOfTerminalEvent(frame.event.type) !== null) this.finished.add(jobId);
      return true;
    }
    if (frame.type === "job") {
      const cmid = frame.client_message_id;
      if (cmid !== undefined) this.unanswered.delete(cmid);
      if (!this.cursors.has(frame.job.id)) this.cursors.set(frame.job.id, 0);
      if (cmid !== undefined && this.resent.delete(cmid) && !this.finished.has(frame.job.id)) {
        // A final job too: its events (the answer) are what the caller is waiting for.
        this.transmit({ type: "resume", job_id: frame.job.id, after: this.cursors.get(frame.job.id) ?? 0 });
      }
    }
    if (frame.type === "error" && frame.client_message_id !== undefined) {
      this.unanswered.delete(frame.client_message_id);
      this.resent.delete(frame.client_message_id);
    }
    return true;
  }

  private retry(): void {
    if (this.currentStatus === "closed") return;
    if (this.failedAttempts >= (this.opts.maxAttempts ?? DEFAULT_MAX_ATTEMPTS)) {
      this.lastError ??= new Error(`chat: ${this.failedAttempts} connection attempts in a row failed`);
      this.close();
      return;
    }
    this.setStatus("reconnecting");
    const delay = Math.min(SSE_RETRY_MS * 2 ** Math.max(0, this.failedAttempts - 1), MAX_BACKOFF_MS);
    setTimeout(() => void this.connect(), delay);
  }
}
