/**
 * The client's chat resume (src/client/chat.ts) against a socket cut after every frame of a
 * recorded answer: whatever the cut, each event reaches the listener once, in order; the
 * reconnect resumes the job from the last offset delivered; a message the server never answered
 * is sent again under the same client_message_id (the server's dedupe makes it one job). The
 * server is an in-memory stand-in that speaks the frames of docs/api.md; timers are faked.
 */
import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import { ChatConnection, type WebSocketLike } from "../../src/client/chat";
import type { ServerFrame } from "../../src/contracts/chat";

const JOB_ID = "7c9e6679-7425-40de-944b-e07fc1f90ae7";
const TEXT = ["Bonjour", ", ", "naïve ", "café ", "🚀", " done"];

function envelope(seq: number, type: string, payload: Record<string, unknown>) {
  return { job_id: JOB_ID, execution_id: "e1", epoch: 1, seq, type, payload, ts: "2026-12-01T01:00:00.000Z" };
}

/** The job's log: run.started, one delta per word, run.completed. */
const LOG = [
  envelope(1, "run.started", {}),
  ...TEXT.map((t, i) => envelope(i + 2, "model.delta", { text: t })),
  envelope(TEXT.length + 2, "run.completed", { output: TEXT.join("") }),
];

const jobView = (state: string) => ({
  id: JOB_ID,
  conversation_id: "c1",
  state,
  claimed: true,
  epoch: 1,
  execution_id: "e1",
  output: null,
  error: null,
  created_at: "2026-12-01T01:00:00.000Z",
  started_at: null,
  prepared_at: null,
  first_output_at: null,
  finished_at: null,
  latency: {},
  model: null,
  tools: [],
  metadata: {},
});

/** The server side: one job per client_message_id; the first socket is cut after `cutAfter` frames. */
class FakeServer {
  readonly sockets: FakeSocket[] = [];
  readonly received: Array<{ socket: number; frame: Record<string, unknown> }> = [];
  readonly jobsCreated = new Set<string>();
  constructor(
    private readonly cutAfter: number,
    private readonly ignoreCursor = false,
  ) {}

  connect(socket: FakeSocket): void {
    this.sockets.push(socket);
  }

  receive(socket: FakeSocket, raw: string): void {
    const frame = JSON.parse(raw) as Record<string, unknown>;
    this.received.push({ socket: this.sockets.indexOf(socket), frame });
    if (frame.type === "message") {
      const cmid = String(frame.client_message_id);
      const fresh = !this.jobsCreated.has(cmid);
      this.jobsCreated.add(cmid);
      this.send(socket, { type: "job", job: jobView("queued"), client_message_id: cmid } as unknown as ServerFrame);
      if (fresh) this.replay(socket, 0);
    } else if (frame.type === "resume") {
      this.replay(socket, this.ignoreCursor ? 0 : Number(frame.after));
    }
  }

  private replay(socket: FakeSocket, after: number): void {
    LOG.forEach((event, i) => {
      if (i + 1 > after) this.send(socket, { type: "event", offset: i + 1, event } as unknown as ServerFrame);
    });
  }

  private send(socket: FakeSocket, frame: ServerFrame): void {
    if (socket.readyState !== 1) return;
    if (this.sockets.indexOf(socket) === 0 && socket.sent >= this.cutAfter) {
      socket.drop();
      return;
    }
    socket.sent++;
    socket.deliver(JSON.stringify(frame));
  }
}

class FakeSocket implements WebSocketLike {
  readyState = 0;
  sent = 0;
  private readonly listeners = new Map<string, Array<(ev: { data: unknown }) => void>>();
  constructor(
    readonly url: string,
    private readonly server: FakeServer,
  ) {
    server.connect(this);
    setTimeout(() => {
      this.readyState = 1;
      this.emit("open", { data: undefined });
    }, 0);
  }
  addEventListener(type: string, listener: (ev: { data: unknown }) => void): void {
    this.listeners.set(type, [...(this.listeners.get(type) ?? []), listener]);
  }
  send(data: string): void {
    if (this.readyState !== 1) throw new Error("send on a socket that is not open");
    queueMicrotask(() => this.server.receive(this, data));
  }
  close(): void {
    this.drop();
  }
  deliver(data: string): void {
    queueMicrotask(() => this.emit("message", { data }));
  }
  drop(): void {
    if (this.readyState === 3) return;
    this.readyState = 3;
    queueMicrotask(() => this.emit("close", { data: undefined }));
  }
  private emit(type: string, ev: { data: unknown }): void {
    for (const l of this.listeners.get(type) ?? []) l(ev);
  }
}

async function run(
  server: FakeServer,
  sendOpts: { agent?: string } = {},
): Promise<{ frames: ServerFrame[]; urls: number; chat: ChatConnection }> {
  let urls = 0;
  const frames: ServerFrame[] = [];
  const WebSocketImpl = class extends FakeSocket {
    constructor(url: string) {
      super(url, server);
    }
  };
  const chat = new ChatConnection(
    async () => `ws://gateway.test/v1/conversations/c1/ws?access_token=t${++urls}`,
    WebSocketImpl,
  );
  chat.onFrame((f) => frames.push(f));
  chat.send("hi", { client_message_id: "m1", ...sendOpts });
  for (let i = 0; i < 50; i++) {
    await vi.advanceTimersByTimeAsync(1_000);
    if (frames.some((f) => f.type === "event" && f.event.type === "run.completed")) break;
  }
  return { frames, urls, chat };
}

const offsetsOf = (frames: ServerFrame[]) => frames.flatMap((f) => (f.type === "event" ? [f.offset] : []));
const textOf = (frames: ServerFrame[]) =>
  frames
    .flatMap((f) =>
      f.type === "event" && f.event.type === "model.delta" ? [(f.event.payload as { text: string }).text] : [],
    )
    .join("");

describe("client chat: resume through a socket cut after every frame", () => {
  beforeEach(() => {
    vi.useFakeTimers();
  });
  afterEach(() => {
    vi.useRealTimers();
  });

  // 0 = cut before the job frame; LOG.length + 1 = the whole answer arrived before the cut.
  for (let cut = 0; cut <= LOG.length + 1; cut++) {
    it(`cut after ${cut} frame(s): every event once, in order, and one job`, async () => {
      const server = new FakeServer(cut);
      const { frames, urls, chat } = await run(server);
      expect(offsetsOf(frames)).toEqual(LOG.map((_, i) => i + 1));
      expect(textOf(frames)).toBe(TEXT.join(""));
      expect(server.jobsCreated.size).toBe(1);
      const cutMidAnswer = cut <= LOG.length;
      expect(urls, JSON.stringify(server.received)).toBe(cutMidAnswer ? 2 : 1);
      if (cutMidAnswer) {
        // The second socket resumes from the last offset delivered (cut - 1 events followed the job frame)…
        const onSecond = server.received.filter((r) => r.socket === 1).map((r) => r.frame);
        if (cut === 0) {
          // …or, when even the job frame was lost, sends the message again under the same id, and
          // resumes the job its answer names (the server does not make a repeat's socket follow it).
          expect(onSecond).toEqual([
            { type: "message", content: "hi", client_message_id: "m1" },
            { type: "resume", job_id: JOB_ID, after: 0 },
          ]);
        } else {
          expect(onSecond).toEqual([{ type: "resume", job_id: JOB_ID, after: cut - 1 }]);
        }
      }
      chat.close();
      expect(chat.status).toBe("closed");
    });
  }

  it("sends a message's agent, and sends it again with the message after a cut (the server binds the id to it)", async () => {
    const server = new FakeServer(0);
    const { chat } = await run(server, { agent: "triage@2" });
    const messages = server.received.filter((r) => r.frame.type === "message");
    expect(messages.map((m) => [m.socket, m.frame])).toEqual([
      [0, { type: "message", content: "hi", client_message_id: "m1", agent: "triage@2" }],
      [1, { type: "message", content: "hi", client_message_id: "m1", agent: "triage@2" }],
    ]);
    chat.close();
  });

  it("drops an event frame it already delivered, even when the server replays from the start", async () => {
    const { frames, chat } = await run(new FakeServer(4, true));
    expect(offsetsOf(frames)).toEqual(LOG.map((_, i) => i + 1));
    chat.close();
  });

  it("gives up after maxAttempts connections that never open, and says why", async () => {
    let attempts = 0;
    const Never = class implements WebSocketLike {
      readyState = 0;
      private onClose: (() => void) | undefined;
      constructor() {
        attempts++;
        setTimeout(() => this.onClose?.(), 0);
      }
      addEventListener(type: string, listener: (ev: { data: unknown }) => void): void {
        if (type === "close") this.onClose = () => listener({ data: undefined });
      }
      send(): void {}
      close(): void {}
    };
    const chat = new ChatConnection(async () => "ws://x", Never, { maxAttempts: 3 });
    await vi.advanceTimersByTimeAsync(60_000);
    expect(attempts).toBe(3);
    expect(chat.status).toBe("closed");
    expect(String(chat.error)).toMatch(/3 connection attempts/);
  });
});
