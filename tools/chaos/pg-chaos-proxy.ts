/**
 * A loopback TCP proxy between one sandbox-host and Postgres, so the chaos harness can put a
 * host exactly where it wants without any test hook in the host: it holds the claim statement
 * for a few ms (a SIGKILL then lands before the claim commits) and the started CAS for a few
 * hundred ms (a SIGKILL or SIGSTOP then lands between claim and start), and `pause()` holds
 * everything the host sends while it is SIGSTOPped (a frozen process sends nothing; what it had
 * queued arrives after SIGCONT — the late started CAS the fencing must reject).
 *
 * Statements are recognised by their SQL text in the Parse message (node-postgres sends the
 * text with every parameterised query). Each connection is a FIFO, so a held chunk also holds
 * everything the host sends after it on that connection, like a slow network would. When the
 * host's side closes (SIGKILL), whatever is still held is dropped: it never reaches Postgres.
 *
 * Once a started CAS has been forwarded, Postgres' answer to it is held for `startReplyDelayMs`:
 * the start is committed but the host does not know yet, so a SIGKILL then lands after the
 * start and before the host could emit (let alone deliver) `run.started` — the crash whose
 * stream must still show the start, from Postgres.
 */
import { connect, createServer, type Server, type Socket } from "node:net";

export type HeldKind = "claim" | "start" | "other";

/**
 * The fenced claim (claimJob / claimFromPostgres) and the started CAS, as ownership-repo.ts writes
 * them. A host on a direct connection sends them as named prepared statements: their text is in
 * the first Parse only, their name (`ear_claim_…`, `ear_start`) in every Bind.
 */
const CLAIM = /claimed_at = now\(\), epoch = (?:j\.|jobs\.)?epoch \+ 1|ear_claim_(?:ready|poll)/;
const START = /SET state = 'running', execution_id|ear_start\b/;

export function classifyChunk(chunk: Buffer): HeldKind {
  const text = chunk.toString("latin1");
  if (CLAIM.test(text)) return "claim";
  if (START.test(text)) return "start";
  return "other";
}

export interface ChaosProxyOptions {
  /** Postgres to forward to. */
  target: { host: string; port: number };
  /** Extra delay before a claim statement is forwarded. */
  claimDelayMs: number;
  /** Extra delay before a started CAS is forwarded. */
  startDelayMs: number;
  /** How long Postgres' answer to a forwarded started CAS is held back from the host (default 0). */
  startReplyDelayMs?: number;
}

interface Pending {
  buf: Buffer;
  due: number;
  kind: HeldKind;
}

class Link {
  readonly queue: Pending[] = [];
  private connected = false;
  private timer: NodeJS.Timeout | null = null;
  private closed = false;
  /** Answers from Postgres held back from the host, and until when. */
  private readonly replies: Buffer[] = [];
  private holdRepliesUntil = 0;
  private replyTimer: NodeJS.Timeout | null = null;
  /** A forwarded started CAS whose answer the host has not received yet. */
  startAnswerHeld = false;

  constructor(
    readonly client: Socket,
    readonly server: Socket,
    private readonly proxy: ChaosProxy,
  ) {
    server.once("connect", () => {
      this.connected = true;
      this.pump();
    });
    client.on("data", (buf: Buffer) => {
      const kind = classifyChunk(buf);
      this.queue.push({ buf, kind, due: Date.now() + proxy.delayFor(kind) });
      this.pump();
    });
    server.on("data", (buf: Buffer) => {
      if (Date.now() < this.holdRepliesUntil || this.replies.length > 0) {
        this.replies.push(buf);
        this.scheduleReplies();
      } else {
        if (!client.destroyed) client.write(buf);
        this.startAnswerHeld = false;
      }
    });
    const close = () => this.close();
    client.on("close", close);
    server.on("close", close);
    client.on("error", close);
    server.on("error", close);
  }

  pump(): void {
    if (this.timer) clearTimeout(this.timer);
    this.timer = null;
    if (this.closed || !this.connected || this.proxy.paused) return;
    const now = Date.now();
    while (this.queue.length > 0 && (this.queue[0] as Pending).due <= now) {
      const p = this.queue.shift() as Pending;
      this.server.write(p.buf);
      const hold = this.proxy.startReplyDelayMs;
      if (p.kind === "start" && hold > 0) {
        this.holdRepliesUntil = now + hold;
        this.startAnswerHeld = true;
      }
    }
    const next = this.queue[0];
    if (next) this.timer = setTimeout(() => this.pump(), next.due - now);
  }

  private scheduleReplies(): void {
    if (this.replyTimer || this.closed) return;
    this.replyTimer = setTimeout(
      () => {
        this.replyTimer = null;
        if (this.closed) return;
        if (this.proxy.paused || Date.now() < this.holdRepliesUntil) return this.scheduleReplies();
        for (const b of this.replies.splice(0)) if (!this.client.destroyed) this.client.write(b);
        this.startAnswerHeld = false;
      },
      Math.max(1, this.holdRepliesUntil - Date.now()),
    );
  }

  /** The host side is gone: drop what it had not delivered yet. */
  close(): void {
    if (this.closed) return;
    this.closed = true;
    if (this.timer) clearTimeout(this.timer);
    if (this.replyTimer) clearTimeout(this.replyTimer);
    this.queue.length = 0;
    this.client.destroy();
    this.server.destroy();
    this.proxy.forget(this);
  }
}

export class ChaosProxy {
  paused = false;
  private readonly links = new Set<Link>();
  private server: Server | null = null;
  port = 0;

  constructor(private readonly opts: ChaosProxyOptions) {}

  async listen(): Promise<number> {
    const server = createServer((client) => {
      client.setNoDelay(true);
      const upstream = connect({ host: this.opts.target.host, port: this.opts.target.port });
      upstream.setNoDelay(true);
      this.links.add(new Link(client, upstream, this));
    });
    await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
    this.server = server;
    this.port = (server.address() as { port: number }).port;
    return this.port;
  }

  get startReplyDelayMs(): number {
    return this.opts.startReplyDelayMs ?? 0;
  }

  /** Started CASes Postgres has committed whose answer the host has not received yet. */
  startsAnswerHeld(): number {
    let n = 0;
    for (const l of this.links) if (l.startAnswerHeld) n++;
    return n;
  }

  delayFor(kind: HeldKind): number {
    if (kind === "claim") return this.opts.claimDelayMs;
    if (kind === "start") return this.opts.startDelayMs;
    return 0;
  }

  /** Statements of this kind the host has sent that Postgres has not seen yet. */
  held(kind: HeldKind): number {
    let n = 0;
    for (const l of this.links) for (const p of l.queue) if (p.kind === kind) n++;
    return n;
  }

  /** Hold everything the host sends (it is frozen) until resume(). */
  pause(): void {
    this.paused = true;
  }

  resume(): void {
    this.paused = false;
    for (const l of this.links) l.pump();
  }

  forget(link: Link): void {
    this.links.delete(link);
  }

  async close(): Promise<void> {
    for (const l of [...this.links]) l.close();
    await new Promise<void>((r) => (this.server ? this.server.close(() => r()) : r()));
  }
}
