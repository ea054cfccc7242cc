/**
 * One Redis connection for `INFO clients` (ioredis, one named connection): the load generator's own
 * footprint on Redis is exactly this connection, which it subtracts. A command gets one retry and
 * the connection three reconnects, so a sample against a stopped Redis fails (measured: ~0.1 s)
 * instead of waiting in the offline queue.
 */
import { Redis } from "ioredis";

export class RespInfo {
  private readonly redis: Redis;

  constructor(url: string) {
    this.redis = new Redis(url, {
      lazyConnect: true,
      connectionName: "ear-load-sampler",
      enableOfflineQueue: true,
      maxRetriesPerRequest: 1,
      commandTimeout: 2000,
      // A sampler must not hold the process open or retry forever against a stopped Redis.
      retryStrategy: (attempt) => (attempt > 3 ? null : 100 * attempt),
    });
    this.redis.on("error", () => {}); // a failed sample is reported by the caller's rejection
  }

  private async connected(): Promise<Redis> {
    if (this.redis.status === "wait" || this.redis.status === "end") await this.redis.connect();
    return this.redis;
  }

  /** One `INFO <section>` as raw strings. */
  async info(section: string): Promise<Record<string, string>> {
    const text = await (await this.connected()).info(section);
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
    const list = (await this.redis.call("CLIENT", "LIST")) as string;
    out.pubsub_clients = list.split("\n").filter((l) => /\b(sub|psub|ssub)=[1-9]/.test(l)).length;
    // A sleeping host's wake-poll: a BLPOP on a connection of its own (the bridge opens one per
    // wait and closes it after the reply, so a host may show two for a moment). Not a leak.
    out.wake_poll_clients = list.split("\n").filter((l) => /\bcmd=blpop\b/.test(l)).length;
    return out;
  }

  close(): void {
    this.redis.disconnect();
  }
}
