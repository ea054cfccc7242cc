/**
 * `edge-agent-runtime/ai-sdk`, `EarChatTransport`: the AI SDK's `ChatTransport` (what `useChat` plugs a backend in with) over
 * a conversation's chat WebSocket (docs/api.md "Conversations"), so a page needs only a
 * conversation-bound write token: the socket carries messages, cancels and resumes, and GET
 * /v1/conversations/{id}/messages (the one REST route such a token reaches) gives the history
 * and each answer's latency. The chat id is the conversation id.
 *
 * - `sendMessages` sends the last user message (its UI id as the `client_message_id`, so a
 *   resend after a dropped socket never submits twice) and streams that job's events as chunks.
 * - `reconnectToStream` finds the conversation's unanswered job (the history's last turn is a
 *   user message with no answer yet) and replays it from its first event: `resumeStreamIsReplay`,
 *   so useChat resets the message it had (the answer's id is the job id) instead of appending to
 *   it, and the page ends with exactly the job's text whatever it kept across the reload.
 * - The abort signal (useChat's `stop()`) sends `cancel` for the job: committed in Postgres, so
 *   the job ends `cancelled` whatever happens to the page next. A page that closes or reloads
 *   sends nothing, and its job runs on.
 */
import type { ChatTransport, UIMessage, UIMessageChunk } from "ai";
import type { ChatConnection, WebSocketConstructor } from "../client/chat";
import { EarClient } from "../client/client";
import type { Credential } from "../client/http";
import type { MultitaskPolicy, ServerFrame } from "../contracts/chat";
import type { ApprovalAnswer } from "../contracts/wait";
import { AnswerChunks, type EarChunk, type EarUIMessage } from "./chunks";

// The package entry `edge-agent-runtime/ai-sdk` is this module: what a page names besides the transport.
export type { Credential } from "../client/http";
export type { MultitaskPolicy } from "../contracts/chat";
export type { ApprovalAnswer } from "../contracts/wait";
export type { ApprovalData, EarDataParts, EarMessageMetadata, EarUIMessage, QueuedData, TimingData } from "./chunks";

export interface EarChatTransportOptions {
  /** The gateway's origin, e.g. `https://api.example.com`. */
  baseUrl: string;
  /** A conversation-bound `write` token (POST /v1/tokens), or an async function returning a current one (called per connection and request). */
  credential: Credential;
  /** The agent (`name` or `name@N`) the messages run; default the tenant's built-in agent. */
  agent?: string;
  /** What a message does while the conversation's job still runs (default `queue`). */
  busy?: MultitaskPolicy;
  fetch?: typeof fetch;
  WebSocket?: WebSocketConstructor;
}

/** How long a `stop()` waits for the gateway's `cancel` answer before closing the stream anyway. */
const CANCEL_ACK_MS = 5_000;
const CLIENT_MESSAGE_ID = /^[A-Za-z0-9._:-]{1,100}$/;

export class EarChatTransport<M extends UIMessage = EarUIMessage> implements ChatTransport<M> {
  /** A reconnect replays the answer from its first event (see the top of this file). */
  readonly resumeStreamIsReplay = true;
  private readonly client: EarClient;
  private readonly connections = new Map<string, ChatConnection>();
  private sent = 0;

  constructor(private readonly opts: EarChatTransportOptions) {
    this.client = new EarClient({
      baseUrl: opts.baseUrl,
      credential: opts.credential,
      fetch: opts.fetch,
      WebSocket: opts.WebSocket,
    });
  }

  /** The conversation so far as UI messages (GET …/messages): an answer's id is its job id, as the streams give it. */
  async loadMessages(chatId: string, signal?: AbortSignal): Promise<EarUIMessage[]> {
    let turns: Awaited<ReturnType<EarClient["messages"]>>["messages"];
    try {
      turns = (await this.client.messages(chatId, { signal })).messages;
    } catch (err) {
      if ((err as { status?: number }).status === 404) return []; // no job yet: a new conversation
      throw err;
    }
    return turns.map((m) => ({
      id: m.role === "user" ? `${m.job_id}:user` : m.job_id,
      role: m.role,
      parts: [{ type: "text", text: m.content }],
      metadata: { job_id: m.job_id, ...(m.role === "assistant" ? { latency: m.latency } : {}) },
    }));
  }

  sendMessages: ChatTransport<M>["sendMessages"] = async ({ chatId, messages, abortSignal, trigger }) => {
    const user = messages.findLast((m) => m.role === "user");
    if (!user) throw new Error("EarChatTransport: no user message to send");
    const content = user.parts.map((p) => (p.type === "text" ? p.text : "")).join("");
    const base = CLIENT_MESSAGE_ID.test(user.id) ? user.id : `m-${Date.now().toString(36)}`;
    // A regenerate asks for a new answer to the same text: a new message id, or the server would return the old job.
    const clientMessageId = trigger === "regenerate-message" ? `${base.slice(0, 80)}:r${++this.sent}` : base;
    const conn = this.connection(chatId);
    return this.answer(chatId, conn, abortSignal, { clientMessageId, content });
  };

  reconnectToStream: ChatTransport<M>["reconnectToStream"] = async ({ chatId, abortSignal }) => {
    const history = await this.loadMessages(chatId, abortSignal);
    const last = history.at(-1);
    if (last?.role !== "user" || !last.metadata) return null;
    // useChat aborts a resume it supersedes (React's StrictMode mounts twice). During the read
    // the aborted fetch ends it; just after it, this does: no stream, so nothing is cancelled.
    if (abortSignal?.aborted) return null;
    // Its own socket, so the replay starts at the job's first event whatever this page's other socket already saw.
    const conn = this.client.chat(chatId, this.chatOptions());
    return this.answer(chatId, conn, abortSignal, { jobId: last.metadata.job_id, closeAfter: true });
  };

  /**
   * Approve or deny a tool call this chat's job waits on (an `approval` data part's `job_id` and
   * `call_id`), with the page's own conversation-bound token: POST
   * /v1/conversations/{chatId}/jobs/{job_id}/approvals/{call_id}. The job resumes and the same
   * stream goes on with its answer; a job of another conversation is refused (403).
   */
  async decide(
    chatId: string,
    call: { job_id: string; call_id: string; decision: "approve" | "deny"; note?: string },
    signal?: AbortSignal,
  ): Promise<ApprovalAnswer & { created: boolean }> {
    const { job_id, call_id, ...body } = call;
    return this.client.decideInConversation(chatId, job_id, call_id, body, { signal });
  }

  /** Closes every conversation's socket (the jobs run on). */
  close(): void {
    for (const conn of this.connections.values()) conn.close();
    this.connections.clear();
  }

  private chatOptions() {
    return { multitask: this.opts.busy, agent: this.opts.agent };
  }

  private connection(chatId: string): ChatConnection {
    let conn = this.connections.get(chatId);
    if (!conn || conn.status === "closed") {
      conn = this.client.chat(chatId, this.chatOptions());
      this.connections.set(chatId, conn);
    }
    return conn;
  }

  /** The stream of one answer: a new message's (`clientMessageId`) or an existing job's (`jobId`, replayed from 0). */
  private answer(
    chatId: string,
    conn: ChatConnection,
    signal: AbortSignal | undefined,
    what: { clientMessageId: string; content: string } | { jobId: string; closeAfter: true },
  ): ReadableStream<UIMessageChunk> {
    let chunks: AnswerChunks | null = "jobId" in what ? new AnswerChunks(what.jobId) : null;
    let done = false;
    /** False once the reader cancelled: nothing is enqueued any more. */
    let reading = true;
    let unsubscribe = () => {};
    const closeAfter = "closeAfter" in what;
    const client = this.client;
    return new ReadableStream<EarChunk>({
      start: (controller) => {
        const end = (error?: string) => {
          if (done) return;
          done = true;
          unsubscribe();
          if (closeAfter) conn.close();
          try {
            if (error !== undefined) controller.enqueue({ type: "error", errorText: error });
            controller.close();
          } catch {
            // the reader already cancelled
          }
        };
        const write = (list: EarChunk[]) => {
          if (done || !reading) return;
          for (const c of list) controller.enqueue(c);
        };
        /** Sends the cancel, and closes the stream once it is answered (or after CANCEL_ACK_MS). */
        const cancel = () => {
          if (!chunks) return; // not a job yet (queued): cancelled when its job frame comes (below)
          conn.cancel(chunks.jobId);
          setTimeout(() => end(), CANCEL_ACK_MS);
        };
        const onFrame = (frame: ServerFrame) => {
          if (frame.type === "job" && "clientMessageId" in what && frame.client_message_id === what.clientMessageId) {
            if (chunks) return;
            chunks = new AnswerChunks(frame.job.id);
            if (signal?.aborted) return cancel();
            write([chunks.start()]);
          } else if (
            frame.type === "queued" &&
            "clientMessageId" in what &&
            frame.client_message_id === what.clientMessageId
          ) {
            write([{ type: "data-queued", data: { position: frame.position }, transient: true }]);
          } else if (
            frame.type === "error" &&
            "clientMessageId" in what &&
            frame.client_message_id === what.clientMessageId
          ) {
            end(`${frame.error.code}: ${frame.error.message}`);
          } else if (frame.type === "cancel" && chunks && frame.job_id === chunks.jobId && signal?.aborted) {
            end(); // the cancel is committed: the stream the page stopped reading can go
          } else if (frame.type === "event" && chunks && frame.event.job_id === chunks.jobId) {
            if (signal?.aborted) return;
            const answer = chunks;
            write(answer.event(frame.event));
            if (answer.ended) {
              void latencyOf(client, chatId, answer.jobId).then((latency) => {
                write(answer.finish(latency));
                end();
              });
            }
          }
        };
        unsubscribe = conn.onFrame(onFrame);
        signal?.addEventListener("abort", () => cancel(), { once: true });
        if (chunks) {
          write([chunks.start()]);
          conn.resume(chunks.jobId, 0);
        } else if ("clientMessageId" in what) {
          conn.send(what.content, {
            client_message_id: what.clientMessageId,
            multitask: this.opts.busy,
            agent: this.opts.agent,
          });
        }
      },
      // The page stopped reading. After a stop() (useChat cancels the reader at once) of a message
      // that is not a job yet, the frames are still watched until its job comes and is cancelled;
      // otherwise (it unmounted or closed) nothing is cancelled.
      cancel: () => {
        reading = false;
        if (signal?.aborted && !chunks) return;
        done = true;
        unsubscribe();
        if (closeAfter) conn.close();
      },
    });
  }
}

/** The finished job's latency from the conversation's history (null when it has none: no output). */
async function latencyOf(client: EarClient, chatId: string, jobId: string) {
  try {
    const { messages } = await client.messages(chatId);
    return messages.find((m) => m.role === "assistant" && m.job_id === jobId)?.latency ?? null;
  } catch {
    return null;
  }
}
