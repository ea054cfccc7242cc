/**
 * ChatSessionObject — one Durable Object per tenant + conversation (`idFromName(tenant:conv)`,
 * session-address.ts). It owns the client WebSockets of the conversation through the hibernation
 * API, turns `message` frames into jobs, applies the multitask policy while a job runs, and
 * relays every event of the conversation's jobs with its per-job offset.
 *
 * Relay: after creating a job the session registers with the job's JobEvents object (`watch`),
 * which pushes each append here (`relay`). Nothing the session needs lives only in memory: the
 * conversation's jobs and the last offset relayed per job are in storage, each socket's cursor
 * per job is in its attachment. So after hibernation or eviction the next push, frame or watchdog
 * alarm carries on: what a push does not cover is pulled from the job's log (`page`), and each
 * socket is sent only offsets above its own cursor — no duplicate, no gap. All frame handling and
 * delivery runs one task at a time (`serial`), because awaiting Postgres or another object lets
 * the next input in.
 *
 * This class only wires the entry points to the parts, one concern each: upgrade.ts and
 * sockets.ts (the sockets), frame-handler.ts (a frame), busy-policy.ts, message-queue.ts and
 * job-submit.ts (a message while a job runs, the queue behind it, a message becoming a job),
 * event-delivery.ts (the relay), watchdog.ts (following a job, lost pushes), socket-leases.ts
 * (the tenant's stream count), session-store.ts (the storage) and session.ts (what they share).
 */
import { DurableObject } from "cloudflare:workers";
import type { Env } from "../../env";
import type { LoggedEvent } from "../job-events/event-log";
import type { ChatSessionRpc } from "../rpc";
import { type ChatBackend, postgresChatBackend } from "./chat-backend";
import { deliver } from "./event-delivery";
import { handleFrame } from "./frame-handler";
import { startNext } from "./message-queue";
import type { Session } from "./session";
import { SessionStore } from "./session-store";
import { releaseLease, renewLeases } from "./socket-leases";
import { closeSocket } from "./sockets";
import { acceptSocket } from "./upgrade";
import { watchdogPass } from "./watchdog";

export class ChatSessionObject extends DurableObject<Env> implements ChatSessionRpc {
  /** Injectable for tests; the default talks to Postgres and Redis like the gateway does. */
  backend: ChatBackend;
  private readonly session: Session;
  private chain: Promise<unknown> = Promise.resolve();

  constructor(ctx: DurableObjectState, env: Env) {
    super(ctx, env);
    this.backend = postgresChatBackend(env);
    this.session = {
      ctx,
      env,
      backend: () => this.backend,
      store: new SessionStore(ctx.storage),
      jobFinished: (jobId) => startNext(this.session, jobId),
    };
  }

  override fetch(request: Request): Promise<Response> {
    return acceptSocket(this.session, request);
  }

  override async webSocketMessage(ws: WebSocket, message: string | ArrayBuffer): Promise<void> {
    await this.serial(() => handleFrame(this.session, ws, message));
  }

  override async webSocketClose(ws: WebSocket, code: number, reason: string): Promise<void> {
    closeSocket(ws, code, reason);
    await releaseLease(this.session, ws);
  }

  override async webSocketError(ws: WebSocket): Promise<void> {
    try {
      ws.close(1011, "error");
    } catch {}
    await releaseLease(this.session, ws);
  }

  /** Pushed by a JobEvents object after each append to a job this session watches. */
  async relay(jobId: string, events: LoggedEvent[]): Promise<void> {
    await this.serial(() => deliver(this.session, jobId, events));
  }

  /**
   * Watchdog: re-register and pull every unfinished job, in case a push was lost. Also renews the
   * open sockets' stream leases: a hibernated object has no timer, so the alarm is what wakes it
   * (every STREAM_LEASE.socketRenewMs while a counted socket is open).
   */
  override async alarm(): Promise<void> {
    try {
      await this.serial(() => watchdogPass(this.session));
    } finally {
      // After the watchdog re-armed (5 s): renewal keeps whichever alarm is sooner.
      await renewLeases(this.session);
    }
  }

  private serial<T>(task: () => Promise<T>): Promise<T> {
    const run = this.chain.then(task, task);
    this.chain = run.catch(() => {});
    return run;
  }
}
