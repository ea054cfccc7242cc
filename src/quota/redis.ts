/**
 * The one way runtime code builds a Redis client: @upstash/redis over REST (Upstash in
 * production, tools/bridges/upstash-rest/main.ts locally). Retries are short so a dead Redis is noticed in
 * well under a second instead of the client's default ~5 exponential retries.
 */
import { Redis } from "@upstash/redis";

export interface RedisClientOptions {
  url: string;
  token: string;
  /** Network retries per command (default 1). */
  retries?: number;
  /**
   * Batch concurrent commands into one request (default true). Off for a client shared by
   * concurrent requests of a Worker isolate: a batch would settle one request's command from
   * another request's fetch, which workerd forbids (workers/deps.ts).
   */
  autoPipelining?: boolean;
}

export function createRedisClient({ url, token, retries = 1, autoPipelining = true }: RedisClientOptions): Redis {
  return new Redis({
    url,
    token,
    retry: { retries, backoff: (n) => 25 * 2 ** n },
    enableTelemetry: false,
    enableAutoPipelining: autoPipelining,
  });
}

export type { Redis };
