/**
 * One raw RESP connection to Redis for `INFO clients` (no client library, no pool): the load
 * tool's own footprint on Redis is exactly this one connection, which it subtracts.
 */
import { createConnection, type Socket } from "node:net";

export class RespInfo {
  private sock: Socket | null = null;
  private buf = Buffer.alloc(0);
  private waiter: { resolve: (s: string) => void; reject: (e: Error) => void } | null = null;

  constructor(private readonly url: string) {}

  private async connect(): Promise<Socket> {
    if (this.sock && !this.sock.destroyed) return this.sock;
    const u = new URL(this.url);
    const sock = createConnection({ host: u.hostname || "127.0.0.1", port: Number(u.port || 6379) });
    sock.setNoDelay(true);
    await new Promise<void>((resolve, reject) => {
      sock.once("connect", resolve);
      sock.once("error", reject);
    });
    sock.on("data", (d: Buffer) => {
      this.buf = Buffer.concat([this.buf, d]);
      this.drain();
    });
    const fail = (e: Error) => {
      this.waiter?.reject(e);
      this.waiter = null;
      this.sock = null;
    };
    sock.on("error", fail);
    sock.on("close", () => fail(new Error("redis connection closed")));
    this.sock = sock;
    this.buf = Buffer.alloc(0);
    if (u.password) await this.command(u.username ? ["AUTH", u.username, u.password] : ["AUTH", u.password]);
    await this.command(["CLIENT", "SETNAME", "ear-load-sampler"]);
    return sock;
  }

  private drain() {
    if (!this.waiter) return;
    const b = this.buf;
    const nl = b.indexOf("\r\n");
    if (nl === -1) return;
    const head = b.subarray(0, nl).toString();
    if (head[0] === "$") {
      const len = Number(head.slice(1));
      if (len < 0) return this.settle(nl + 2, "");
      if (b.length < nl + 2 + len + 2) return;
      return this.settle(nl + 2 + len + 2, b.subarray(nl + 2, nl + 2 + len).toString());
    }
    if (head[0] === "-") {
      const w = this.waiter;
      this.waiter = null;
      this.buf = b.subarray(nl + 2);
      w.reject(new Error(head.slice(1)));
      return;
    }
    return this.settle(nl + 2, head.slice(1));
  }

  private settle(consumed: number, value: string) {
    const w = this.waiter;
    this.waiter = null;
    this.buf = this.buf.subarray(consumed);
    w?.resolve(value);
  }

  private command(args: string[]): Promise<string> {
    const sock = this.sock;
    if (!sock) return Promise.reject(new Error("not connected"));
    return new Promise<string>((resolve, reject) => {
      const timer = setTimeout(() => {
        this.waiter = null;
        sock.destroy();
        reject(new Error("redis INFO timed out"));
      }, 2000);
      this.waiter = {
        resolve: (s) => {
          clearTimeout(timer);
          resolve(s);
        },
        reject: (e) => {
          clearTimeout(timer);
          reject(e);
        },
      };
      sock.write(`*${args.length}\r\n${args.map((a) => `$${Buffer.byteLength(a)}\r\n${a}\r\n`).join("")}`);
      this.drain();
    });
  }

  /** One `INFO <section>` as raw strings. */
  async info(section: string): Promise<Record<string, string>> {
    await this.connect();
    const text = await this.command(["INFO", section]);
    const out: Record<string, string> = {};
    for (const line of text.split("\r\n")) {
      const i = line.indexOf(":");
      if (i > 0) out[line.slice(0, i)] = line.slice(i + 1);
    }
    return out;
  }

  /** `INFO clients` as numbers; `connected_clients` excludes this connection. */
  async clients(): Promise<Record<string, number>> {
    const out: Record<string, number> = {};
    for (const [k, v] of Object.entries(await this.info("clients"))) {
      if (/^-?\d+(\.\d+)?$/.test(v)) out[k] = Number(v);
    }
    if (out.connected_clients !== undefined) out.connected_clients -= 1;
    // Redis 7.0 has no pubsub_clients in INFO: count subscribers from CLIENT LIST.
    const list = await this.command(["CLIENT", "LIST"]);
    out.pubsub_clients = list.split("\n").filter((l) => /\b(sub|psub|ssub)=[1-9]/.test(l)).length;
    return out;
  }

  close(): void {
    this.sock?.destroy();
    this.sock = null;
  }
}
