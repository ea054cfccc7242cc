/**
 * ChatSessionObject — one Durable Object per tenant + conversation (`idFromName(tenant:conv)`;
 * tenant ids cannot contain ":", so no other tenant can name this object). It owns the client
 * WebSockets of the conversation through the hibernation API, turns `message` frames into jobs,
 * applies the multitask policy while a job runs, and relays every event of the conversation's
 * jobs with its per-job offset.
 *
 * Relay: after creating a job the session registers with the job's JobEvents object (`watch`),
 * which pushes each append here (`relay`). Nothing the session needs lives only in memory: the
 * conversation's jobs and the last offset relayed per job are in storage, each socket's cursor
 * per job is in its attachment. So after hibernation or eviction the next push, frame or watchdog
 * alarm carries on: what a push does not cover is pulled from the job's log (`page`), and each
 * socket is sent only offsets above its own cursor — no duplicate, no gap. All frame handling and
 * delivery runs one task at a time (`serial`), because awaiting Postgres or another object lets
 * the next input in.
 */
import { DurableObject } from "cloudflare:workers";
import {
  type ClientFrame,
  ClientFrameSchema,
  type ClientMessageFrame,
  isChatErrorCode,
  MAX_QUEUED_MESSAGES,
  MULTITASK_POLICIES,
  type MultitaskPolicy,
  type ServerFrame,
} from "../../../src/contracts/chat";
import { ApiError } from "../../../src/contracts/errors";
import { isTerminalEventType } from "../../../src/contracts/events";
import type { JobView } from "../../../src/contracts/job";
import { isFinalState } from "../../../src/contracts/job-state";
import { ASK_USER_TOOL } from "../../../src/domain/approval";
import type { Env } from "../../env";
import { log } from "../../log";
import type { LoggedEvent } from "../job-events/event-log";
import type { ChatSessionRpc } from "../rpc";
import { acquireStreamSlot, STREAM_LEASE, settleLeases } from "../tenant-streams/stream-leases";
import { type ChatBackend, chatRequestHash, postgresChatBackend } from "./chat-backend";

export const CHAT_HEADERS = {
  tenant: "x-ear-tenant",
  conversation: "x-ear-conversation",
  multitask: "x-ear-multitask",
  /** The connection's default agent reference (`?agent=`), checked for form by the gateway. */
  agent: "x-ear-agent",
  /** The tenant's open-stream cap (SSE + WebSockets), from the gateway's configuration. */
  streamCap: "x-ear-stream-cap",
  /** SHA-256 of the API key that opened the socket (a token's minting key): its frames count against its rate. */
  keyHash: "x-ear-key-hash",
} as const;

/** While a relayed job is unfinished, pull from its log at least this often (lost pushes, eviction). */
export const CHAT_WATCHDOG_MS = 5_000;
/** Rows per pull from a job's log. */
const PAGE_SIZE = 500;
/** Finished jobs remembered for resume without a Postgres lookup. */
const FINISHED_JOBS_KEPT = 50;
/** client_message_id → job remembered for answering a repeat without Postgres (Postgres dedupes beyond). */
const SENT_MESSAGES_KEPT = 200;
/** A frame is JSON of at most one message plus a little envelope. */
const MAX_FRAME_BYTES = 80 * 1024;

interface Identity {
  tenantId: string;
  conversationId: string;
}

interface RelayedJob {
  /** Highest offset this session has seen from the job's log. */
  relayed: number;
  finished: boolean;
}

interface SentMessage {
  job: string;
  hash: string;
}

interface QueuedMessage {
  content: string;
  client_message_id: string;
  /** The agent reference the job will be submitted with (resolved to a version only then). */
  agent?: string;
}

/** Per socket, survives hibernation (≤ 2 KB): its policy and, per followed job, the last offset sent. */
interface SocketState {
  multitask: MultitaskPolicy;
  /** The connection's default agent reference, for messages that name none. */
  agent?: string;
  cursors: Record<string, number>;
  /** The tenant stream lease this socket holds (tenant-streams/stream-leases.ts), if counted. */
  lease?: string;
  /** The key whose request rate every frame of this socket counts against. */
  keyHash?: string;
}

export function chatSessionName(tenantId: string, conversationId: string): string {
  return `${tenantId}:${conversationId}`;
}

export class ChatSessionObject extends DurableObject<Env> implements ChatSessionRpc {
  /** Injectable for tests; the default talks to Postgres and Redis like the gateway does. */
  backend: ChatBackend;
  private chain: Promise<unknown> = Promise.resolve();

  constructor(ctx: DurableObjectState, env: Env) {
    super(ctx, env);
    this.backend = postgresChatBackend(env);
  }

  // ---- entry points ------------------------------------------------------------------------

  override async fetch(request: Request): Promise<Response> {
    if (request.headers.get("upgrade")?.toLowerCase() !== "websocket") {
      return new Response("expected a WebSocket upgrade", { status: 426 });
    }
    const tenantId = request.headers.get(CHAT_HEADERS.tenant);
    const conversationId = request.headers.get(CHAT_HEADERS.conversation);
    if (!tenantId || !conversationId) return new Response("missing identity", { status: 400 });
    const known = await this.ctx.storage.get<Identity>("identity");
    if (!known) await this.ctx.storage.put("identity", { tenantId, conversationId } satisfies Identity);
    else if (known.tenantId !== tenantId || known.conversationId !== conversationId) {
      return new Response("identity mismatch", { status: 403 });
    }
    const policy = request.headers.get(CHAT_HEADERS.multitask) ?? "queue";
    const multitask = (MULTITASK_POLICIES as readonly string[]).includes(policy)
      ? (policy as MultitaskPolicy)
      : "queue";

    // The tenant's stream slot is taken before the upgrade: past the cap the client gets a 429.
    const slot = await acquireStreamSlot(
      this.env,
      tenantId,
      "ws",
      Number(request.headers.get(CHAT_HEADERS.streamCap) ?? 0),
    );
    if (slot instanceof Response) return slot;

    const pair = new WebSocketPair();
    const [client, server] = [pair[0], pair[1]];
    this.ctx.acceptWebSocket(server);
    // A new connection follows the jobs submitted after it connects, and whatever it `resume`s.
    // It does not start following a job already running: events pushed before its `resume`
    // frame arrives would reach it ahead of the replay (out of order, then again). A client that
    // reconnects resumes with its cursor; one that knows nothing resumes with after=0.
    const agent = request.headers.get(CHAT_HEADERS.agent) ?? undefined;
    const keyHash = request.headers.get(CHAT_HEADERS.keyHash) ?? undefined;
    server.serializeAttachment({
      multitask,
      cursors: {},
      ...(agent ? { agent } : {}),
      ...(slot ? { lease: slot } : {}),
      ...(keyHash ? { keyHash } : {}),
    } satisfies SocketState);
    if (slot) await this.armLeaseRenewal();
    return new Response(null, { status: 101, webSocket: client });
  }

  override async webSocketMessage(ws: WebSocket, message: string | ArrayBuffer): Promise<void> {
    await this.serial(() => this.handleFrame(ws, message));
  }

  override async webSocketClose(ws: WebSocket, code: number, reason: string): Promise<void> {
    // workerd refuses to send 1005/1006 (they mean "no code" / "abnormal"): answer 1000.
    try {
      ws.close(code === 1005 || code === 1006 ? 1000 : code, reason);
    } catch {}
    await this.releaseLease(ws);
  }

  override async webSocketError(ws: WebSocket): Promise<void> {
    try {
      ws.close(1011, "error");
    } catch {}
    await this.releaseLease(ws);
  }

  /** Pushed by a JobEvents object after each append to a job this session watches. */
  async relay(jobId: string, events: LoggedEvent[]): Promise<void> {
    await this.serial(() => this.deliver(jobId, events));
  }

  /**
   * Watchdog: re-register and pull every unfinished job, in case a push was lost. Also renews the
   * open sockets' stream leases: a hibernated object has no timer, so the alarm is what wakes it
   * (every STREAM_LEASE.socketRenewMs while a counted socket is open).
   */
  override async alarm(): Promise<void> {
    try {
      await this.serial(async () => {
        const identity = await this.identity();
        const jobs = await this.jobs();
        for (const [jobId, j] of Object.entries(jobs)) {
          if (j.finished) continue;
          if (identity)
            await this.jobEvents(jobId).watch(jobId, chatSessionName(identity.tenantId, identity.conversationId));
          await this.deliver(jobId);
        }
        await this.armWatchdog();
      });
    } finally {
      // After the watchdog re-armed (5 s): renewal keeps whichever alarm is sooner.
      await this.renewLeases();
    }
  }

  // ---- frames ------------------------------------------------------------------------------

  private async handleFrame(ws: WebSocket, message: string | ArrayBuffer): Promise<void> {
    const parsed = parseFrame(message);
    const frame = "frame" in parsed ? parsed.frame : undefined;
    try {
      // Every frame counts against the socket's key, the invalid ones too, as a request would.
      const { keyHash } = socketState(ws);
      const refused = keyHash === undefined ? null : await this.backend.checkRate(keyHash);
      if (refused) throw refused;
      if (!frame) return send(ws, errorFrame("invalid_frame", (parsed as { invalid: string }).invalid));
      const identity = await this.identity();
      if (!identity) return send(ws, errorFrame("internal", "session has no identity"));
      if (frame.type === "message") await this.onMessage(ws, identity, frame);
      else if (frame.type === "cancel") await this.onCancel(ws, identity, frame.job_id);
      else if (frame.type === "decision") await this.onDecision(ws, identity, frame);
      else await this.onResume(ws, identity, frame.job_id, frame.after);
    } catch (err) {
      const code = err instanceof ApiError && isChatErrorCode(err.code) ? err.code : "internal";
      if (code === "internal") log.error("chat frame failed", { error: err });
      const cmid = frame?.type === "message" ? frame.client_message_id : undefined;
      const retryAfterS = err instanceof ApiError ? err.retryAfterS : undefined;
      send(ws, {
        ...errorFrame(code, code === "internal" ? "the frame could not be handled" : (err as Error).message),
        ...(cmid ? { client_message_id: cmid } : {}),
        ...(retryAfterS === undefined ? {} : { retry_after_s: retryAfterS }),
      });
    }
  }

  private async onMessage(ws: WebSocket, identity: Identity, frame: ClientMessageFrame): Promise<void> {
    const policy = frame.multitask ?? socketState(ws).multitask;
    // The agent goes with the message from here on (into the queue, the job and its hash).
    const agent = frame.agent ?? socketState(ws).agent;
    const message: QueuedMessage = {
      content: frame.content,
      client_message_id: frame.client_message_id,
      ...(agent ? { agent } : {}),
    };
    // A client_message_id that already became a job: the same job again, whatever is running.
    // ...but only for the same content: another message under a used id is a client bug to report,
    // not the old job to pretend was its answer.
    const sent = await this.sentMessages();
    const sentJob = sent[frame.client_message_id];
    if (sentJob) {
      if (typeof sentJob !== "string" && sentJob.hash !== (await chatRequestHash(frame.content, agent))) {
        return send(ws, mismatchFrame(frame.client_message_id));
      }
      const job = await this.backend.findJob(identity.tenantId, typeof sentJob === "string" ? sentJob : sentJob.job);
      if (job) return send(ws, { type: "job", job, client_message_id: frame.client_message_id });
    }
    const queue = (await this.ctx.storage.get<QueuedMessage[]>("queue")) ?? [];
    const alreadyQueued = queue.findIndex((q) => q.client_message_id === frame.client_message_id);
    if (alreadyQueued >= 0) {
      const queued = queue[alreadyQueued];
      if (queued?.content !== frame.content || queued.agent !== agent)
        return send(ws, mismatchFrame(frame.client_message_id));
      return send(ws, { type: "queued", client_message_id: frame.client_message_id, position: alreadyQueued + 1 });
    }
    const active = await this.activeJob();
    if (active === null) return this.submit(identity, message, ws);
    if (policy === "reject") {
      return send(ws, {
        ...errorFrame("conversation_busy", `job ${active} is still running in this conversation`),
        client_message_id: frame.client_message_id,
      });
    }
    if (policy === "interrupt") {
      const status = await this.backend.cancel(identity.tenantId, active);
      this.broadcast({ type: "cancel", job_id: active, status: status });
      return this.submit(identity, message, ws);
    }
    if (queue.length >= MAX_QUEUED_MESSAGES) {
      return send(ws, {
        ...errorFrame("queue_full", `at most ${MAX_QUEUED_MESSAGES} messages may wait behind a running job`),
        client_message_id: frame.client_message_id,
      });
    }
    queue.push(message);
    await this.ctx.storage.put("queue", queue);
    this.broadcast({ type: "queued", client_message_id: frame.client_message_id, position: queue.length });
  }

  private async onCancel(ws: WebSocket, identity: Identity, jobId: string): Promise<void> {
    if (!(await this.belongsHere(identity, jobId)))
      return send(ws, errorFrame("not_found", `no job ${jobId} in this conversation`));
    const status = await this.backend.cancel(identity.tenantId, jobId);
    send(ws, { type: "cancel", job_id: jobId, status });
  }

  private async onDecision(
    ws: WebSocket,
    identity: Identity,
    frame: Extract<ClientFrame, { type: "decision" }>,
  ): Promise<void> {
    if (!(await this.belongsHere(identity, frame.job_id)))
      return send(ws, errorFrame("not_found", `no job ${frame.job_id} in this conversation`));
    const answer = await this.backend.decide(identity.tenantId, frame.job_id, frame.call_id, {
      decision: frame.decision,
      ...(frame.note === undefined ? {} : { note: frame.note }),
    });
    if (!answer) return send(ws, errorFrame("not_found", `job ${frame.job_id} never waited on call ${frame.call_id}`));
    send(ws, { type: "decision", job_id: frame.job_id, ...answer });
  }

  private async onResume(ws: WebSocket, identity: Identity, jobId: string, after: number): Promise<void> {
    if (!(await this.belongsHere(identity, jobId)))
      return send(ws, errorFrame("not_found", `no job ${jobId} in this conversation`));
    const state = socketState(ws);
    state.cursors[jobId] = after;
    ws.serializeAttachment(state);
    const jobs = await this.jobs();
    if (!jobs[jobId]?.finished) await this.watch(identity, jobId);
    await this.deliver(jobId);
  }

  /** A message becomes a job; everyone connected follows it from its first event. */
  private async submit(identity: Identity, frame: QueuedMessage, origin?: WebSocket): Promise<void> {
    const { job, created } = await this.backend.submit({
      tenantId: identity.tenantId,
      conversationId: identity.conversationId,
      content: frame.content,
      clientMessageId: frame.client_message_id,
      ...(frame.agent ? { agent: frame.agent } : {}),
    });
    const sent = await this.sentMessages();
    const recorded = sent[frame.client_message_id];
    if (recorded === undefined || typeof recorded === "string" || recorded.job !== job.id) {
      sent[frame.client_message_id] = { job: job.id, hash: await chatRequestHash(frame.content, frame.agent) };
      const ids = Object.keys(sent);
      for (const old of ids.slice(0, Math.max(0, ids.length - SENT_MESSAGES_KEPT))) delete sent[old];
      await this.ctx.storage.put("messages", sent);
    }
    const jobs = await this.jobs();
    const known = jobs[job.id] !== undefined;
    const finished = isFinalState(job.state);
    if (!known) {
      jobs[job.id] = { relayed: 0, finished: false };
      await this.saveJobs(jobs);
    }
    const jobFrame: ServerFrame = { type: "job", job, client_message_id: frame.client_message_id };
    if (created || !known) {
      for (const ws of this.ctx.getWebSockets()) {
        const state = socketState(ws);
        if (state.cursors[job.id] === undefined && !jobs[job.id]?.finished) state.cursors[job.id] = 0;
        ws.serializeAttachment(state);
        send(ws, jobFrame);
      }
    } else if (origin) {
      send(origin, jobFrame); // a repeated client_message_id: the same job, not a new one
    }
    if (!finished && created) await this.ctx.storage.put("active", job.id);
    if (!jobs[job.id]?.finished) {
      await this.watch(identity, job.id);
      await this.deliver(job.id);
    }
  }

  // ---- relay -------------------------------------------------------------------------------

  private async watch(identity: Identity, jobId: string): Promise<void> {
    await this.jobEvents(jobId).watch(jobId, chatSessionName(identity.tenantId, identity.conversationId));
    await this.armWatchdog();
  }

  /**
   * Send every socket following `jobId` the events above its cursor. `pushed` is used when it
   * starts right where the slowest follower is; otherwise the log is read from there.
   */
  private async deliver(jobId: string, pushed?: LoggedEvent[]): Promise<void> {
    const jobs = await this.jobs();
    const job = jobs[jobId];
    if (!job) return;
    const sockets = this.ctx.getWebSockets().map((ws) => ({ ws, state: socketState(ws), dirty: false }));
    const followers = sockets.filter((s) => s.state.cursors[jobId] !== undefined);
    const from = Math.min(
      job.finished ? Number.POSITIVE_INFINITY : job.relayed,
      ...followers.map((s) => s.state.cursors[jobId] as number),
    );
    if (!Number.isFinite(from)) return;

    let sawTerminal = false;
    let last = job.relayed;
    const emit = (events: Array<{ offset: number; type: string; body: string }>) => {
      for (const e of events) {
        const frame = `{"type":"event","offset":${e.offset},"event":${e.body}}`;
        const request = approvalRequestFrame(jobId, e);
        const terminal = isTerminalEventType(e.type);
        for (const f of followers) {
          const cursor = f.state.cursors[jobId];
          if (cursor === undefined || cursor >= e.offset) continue;
          sendRaw(f.ws, frame);
          if (request) sendRaw(f.ws, request);
          if (terminal) delete f.state.cursors[jobId];
          else f.state.cursors[jobId] = e.offset;
          f.dirty = true;
        }
        if (terminal) sawTerminal = true;
        last = Math.max(last, e.offset);
      }
    };

    const first = pushed?.[0];
    if (pushed && first && first.offset <= from + 1) {
      emit(pushed.filter((e) => e.offset > from));
    } else {
      for (let cursor = from; ; ) {
        const page = await this.jobEvents(jobId).page(cursor, PAGE_SIZE);
        emit(page.events);
        const tail = page.events[page.events.length - 1];
        if (!tail || page.events.length < PAGE_SIZE) break;
        cursor = tail.offset;
      }
    }
    for (const f of followers) if (f.dirty) f.ws.serializeAttachment(f.state);

    const fresh = await this.jobs();
    const current = fresh[jobId];
    if (!current) return;
    const newlyFinished = sawTerminal && !current.finished;
    current.relayed = Math.max(current.relayed, last);
    current.finished ||= sawTerminal;
    await this.saveJobs(fresh);
    if (newlyFinished) await this.onJobFinished(jobId);
  }

  /** The running job ended: the next queued message (if any) becomes the next job. */
  private async onJobFinished(jobId: string): Promise<void> {
    if ((await this.activeJob()) !== jobId) return;
    await this.ctx.storage.delete("active");
    const identity = await this.identity();
    for (;;) {
      const queue = (await this.ctx.storage.get<QueuedMessage[]>("queue")) ?? [];
      const next = queue.shift();
      if (!next || !identity) return;
      await this.ctx.storage.put("queue", queue);
      try {
        await this.submit(identity, next);
        return;
      } catch (err) {
        log.warn("queued chat message could not be submitted", { error: err });
        // A refusal of the message itself (its agent was archived while it waited, say) is told
        // as such; anything else is the dependency that failed, and sending again may work.
        const refused = err instanceof ApiError && (err.code === "invalid_request" || err.code === "conflict");
        this.broadcast({
          ...(refused
            ? errorFrame(err.code as "invalid_request" | "conflict", err.message)
            : errorFrame("dependency_unavailable", "the queued message could not be submitted; send it again")),
          client_message_id: next.client_message_id,
        });
      }
    }
  }

  // ---- state -------------------------------------------------------------------------------

  private async belongsHere(identity: Identity, jobId: string): Promise<boolean> {
    const jobs = await this.jobs();
    if (jobs[jobId]) return true;
    const job: JobView | null = await this.backend.findJob(identity.tenantId, jobId);
    if (!job || job.conversation_id !== identity.conversationId) return false;
    jobs[jobId] = { relayed: 0, finished: false };
    await this.saveJobs(jobs);
    return true;
  }

  /** client_message_id → its job and the hash of its content (a bare job id: stored before hashes were kept). */
  private async sentMessages(): Promise<Record<string, string | SentMessage>> {
    return (await this.ctx.storage.get<Record<string, string | SentMessage>>("messages")) ?? {};
  }

  private identity(): Promise<Identity | undefined> {
    return this.ctx.storage.get<Identity>("identity");
  }

  private async activeJob(): Promise<string | null> {
    return (await this.ctx.storage.get<string>("active")) ?? null;
  }

  private async jobs(): Promise<Record<string, RelayedJob>> {
    return (await this.ctx.storage.get<Record<string, RelayedJob>>("jobs")) ?? {};
  }

  private async saveJobs(jobs: Record<string, RelayedJob>): Promise<void> {
    const finished = Object.keys(jobs).filter((id) => jobs[id]?.finished);
    for (const id of finished.slice(0, Math.max(0, finished.length - FINISHED_JOBS_KEPT))) delete jobs[id];
    await this.ctx.storage.put("jobs", jobs);
  }

  private async renewLeases(): Promise<void> {
    const leases = this.ctx.getWebSockets().flatMap((ws) => socketState(ws).lease ?? []);
    const identity = await this.identity();
    if (identity && leases.length > 0) await settleLeases(this.env, identity.tenantId, "renew", leases);
    await this.armLeaseRenewal();
  }

  private async releaseLease(ws: WebSocket): Promise<void> {
    const state = socketState(ws);
    if (!state.lease) return;
    const lease = state.lease;
    delete state.lease;
    try {
      ws.serializeAttachment(state);
    } catch {}
    const identity = await this.identity();
    if (identity) await settleLeases(this.env, identity.tenantId, "release", [lease]);
  }

  /** Keep an alarm due within the renewal period while any socket holds a lease. */
  private async armLeaseRenewal(): Promise<void> {
    if (!this.ctx.getWebSockets().some((ws) => socketState(ws).lease)) return;
    const due = Date.now() + STREAM_LEASE.socketRenewMs;
    const current = await this.ctx.storage.getAlarm();
    if (current === null || current < Date.now() || current > due) await this.ctx.storage.setAlarm(due);
  }

  private async armWatchdog(): Promise<void> {
    const unfinished = Object.values(await this.jobs()).some((j) => !j.finished);
    if (!unfinished) return;
    const due = Date.now() + CHAT_WATCHDOG_MS;
    const current = await this.ctx.storage.getAlarm();
    if (current === null || current < Date.now()) await this.ctx.storage.setAlarm(due);
  }

  private jobEvents(jobId: string) {
    return this.env.JOB_EVENTS.get(this.env.JOB_EVENTS.idFromName(jobId));
  }

  private broadcast(frame: ServerFrame): void {
    const text = JSON.stringify(frame);
    for (const ws of this.ctx.getWebSockets()) sendRaw(ws, text);
  }

  private serial<T>(task: () => Promise<T>): Promise<T> {
    const run = this.chain.then(task, task);
    this.chain = run.catch(() => {});
    return run;
  }
}

/** A client frame, or why it is not one (the `invalid_frame` message). */
function parseFrame(message: string | ArrayBuffer): { frame: ClientFrame } | { invalid: string } {
  const text = typeof message === "string" ? message : new TextDecoder().decode(message);
  if (text.length > MAX_FRAME_BYTES) return { invalid: `frame larger than ${MAX_FRAME_BYTES} bytes` };
  let raw: unknown;
  try {
    raw = JSON.parse(text);
  } catch {
    return { invalid: "frame is not valid JSON" };
  }
  const parsed = ClientFrameSchema.safeParse(raw);
  if (parsed.success) return { frame: parsed.data };
  const issue = parsed.error.issues[0];
  const where = issue?.path.length ? `${issue.path.join(".")}: ` : "";
  return { invalid: `${where}${issue?.message ?? "invalid frame"}` };
}

function socketState(ws: WebSocket): SocketState {
  const s = ws.deserializeAttachment() as SocketState | null;
  return s ?? { multitask: "queue", cursors: {} };
}

function mismatchFrame(clientMessageId: string) {
  return {
    ...errorFrame("idempotency_mismatch", "client_message_id was already used with different content"),
    client_message_id: clientMessageId,
  };
}

function errorFrame(code: Extract<ServerFrame, { type: "error" }>["error"]["code"], message: string) {
  return { type: "error" as const, error: { code, message } };
}

function send(ws: WebSocket, frame: ServerFrame): void {
  sendRaw(ws, JSON.stringify(frame));
}

function sendRaw(ws: WebSocket, text: string): void {
  try {
    ws.send(text);
  } catch {
    // The socket is closing; its close handler cleans up, and the client resumes by cursor.
  }
}

/**
 * The `approval_request` frame for a `tool.approval_requested` or `input.requested` event (null
 * for any other): what a chat client needs to show the request and answer it, in one frame.
 */
function approvalRequestFrame(jobId: string, e: { offset: number; type: string; body: string }): string | null {
  if (e.type !== "tool.approval_requested" && e.type !== "input.requested") return null;
  const { payload: p } = JSON.parse(e.body) as { payload: Record<string, unknown> };
  const approval = e.type === "tool.approval_requested";
  const frame: ServerFrame = {
    type: "approval_request",
    job_id: jobId,
    offset: e.offset,
    kind: approval ? "approval" : "input",
    call_id: String(p.call_id),
    tool: approval ? String(p.tool) : ASK_USER_TOOL,
    arguments: approval ? p.arguments : { question: p.question },
    question: approval ? null : String(p.question),
    deadline_at: String(p.deadline_at),
  };
  return JSON.stringify(frame);
}
