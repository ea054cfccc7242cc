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
 */
import { connect, createServer, type Server, type Socket } from "node:net";

export type HeldKind = "claim" | "start" | "other";

/** The fenced claim (claimJob / claimFromPostgres) and the started CAS, as ownership-repo.ts writes them. */
const CLAIM = /claimed_at = now\(\), epoch = (?:j\.|jobs\.)?epoch \+ 1/;
const START = /SET state = 'running', execution_id/;

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
      if (!client.destroyed) client.write(buf);
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
      this.server.write((this.queue.shift() as Pending).buf);
    }
    const next = this.queue[0];
    if (next) this.timer = setTimeout(() => this.pump(), next.due - now);
  }

  /** The host side is gone: drop what it had not delivered yet. */
  close(): void {
    if (this.closed) return;
    this.closed = true;
    if (this.timer) clearTimeout(this.timer);
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
