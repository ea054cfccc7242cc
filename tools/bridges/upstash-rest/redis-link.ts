/**
 * The bridge's one shared Redis connection. Three choices make it behave like Upstash:
 * - RESP2 and commands whose reply transformer is a no-op: ioredis reshapes HGETALL into an
 *   object, ZRANGE WITHSCORES into pairs, … and @upstash/redis expects the flat arrays Redis sends.
 * - Buffer replies, so binary values are encoded from their bytes, not from a lossy UTF-8 string.
 * - Fail fast: no offline queue, no resend, a short connect timeout. A request while Redis is down
 *   is answered 503 at once instead of waiting in a queue; reconnects continue in the background
 *   (every ≤250 ms), so the bridge recovers on its own when Redis comes back.
 */
import { Command, type Pipeline, Redis, ReplyError } from "ioredis";
import type { CommandLine } from "./commands";
import type { RawReply } from "./reply";

/** Redis could not be reached or did not answer: HTTP 503, never a per-command error. */
export class RedisUnavailableError extends Error {
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = "RedisUnavailableError";
  }
}

export type Outcome = { ok: true; reply: RawReply } | { ok: false; error: string };

/** Skips ioredis's per-command reply reshaping (HGETALL → object, …). */
class RawCommand extends Command {
  constructor(cmd: CommandLine) {
    super(cmd.name, cmd.args);
  }
  override transformReply(result: Buffer | Buffer[]): Buffer | Buffer[] {
    return result;
  }
}

export interface RedisLinkOptions {
  connectTimeoutMs?: number;
  /** Upper bound on one command or batch; a hung Redis answers 503 after this. */
  commandTimeoutMs?: number;
  onStatus?: (message: string) => void;
}

export class RedisLink {
  readonly #redis: Redis;
  #closing = false;

  constructor(url: string, { connectTimeoutMs = 500, commandTimeoutMs = 10_000, onStatus }: RedisLinkOptions = {}) {
    this.#redis = new Redis(url, {
      protocol: 2,
      enableOfflineQueue: false,
      autoResendUnfulfilledCommands: false,
      maxRetriesPerRequest: 0,
      connectTimeout: connectTimeoutMs,
      commandTimeout: commandTimeoutMs,
      retryStrategy: (attempt) => Math.min(25 * attempt, 250),
    });
    let down = false;
    const wentDown = (why: string) => {
      if (!down && !this.#closing) onStatus?.(`redis unreachable (${why}); retrying every ≤250 ms`);
      down = true;
    };
    this.#redis.on("error", (err: Error) => wentDown(err.message));
    // A clean server shutdown closes the socket without an "error" event, and a reconnect that
    // lands after the restart never sees one either (CI caught the missing log line that way).
    this.#redis.on("close", () => wentDown("connection closed"));
    this.#redis.on("ready", () => {
      if (down) onStatus?.("redis reachable again");
      down = false;
    });
  }

  get ready(): boolean {
    return this.#redis.status === "ready";
  }

  /** Resolves once connected, or after `timeoutMs` regardless: a bridge may start before Redis. */
  waitUntilReady(timeoutMs: number): Promise<boolean> {
    if (this.ready) return Promise.resolve(true);
    return new Promise((resolve) => {
      const done = (ok: boolean) => {
        clearTimeout(timer);
        this.#redis.off("ready", onReady);
        resolve(ok);
      };
      const onReady = () => done(true);
      const timer = setTimeout(() => done(false), timeoutMs);
      this.#redis.once("ready", onReady);
    });
  }

  async run(cmd: CommandLine): Promise<Outcome> {
    this.#assertReady();
    try {
      return { ok: true, reply: (await this.#redis.sendCommand(new RawCommand(cmd))) as RawReply };
    } catch (err) {
      return toOutcome(err);
    }
  }

  /**
   * A bounded BLPOP/BRPOP (commands.ts isBoundedBlockingPop) on a connection of its own, closed
   * after the reply: the shared connection never waits on it. No ready check (its INFO would be
   * counted as a command), and a command timeout past the wait.
   */
  async runBlocking(cmd: CommandLine, waitS: number): Promise<Outcome> {
    this.#assertReady();
    const own = this.#redis.duplicate({
      enableReadyCheck: false,
      commandTimeout: Math.ceil(waitS * 1000) + 5_000,
      retryStrategy: () => null,
      lazyConnect: true,
    });
    own.on("error", () => {});
    try {
      await own.connect();
      return { ok: true, reply: (await own.sendCommand(new RawCommand(cmd))) as RawReply };
    } catch (err) {
      return toOutcome(err);
    } finally {
      own.disconnect();
    }
  }

  /** Not atomic: other requests' commands may interleave, exactly as on Upstash. */
  async pipeline(cmds: CommandLine[]): Promise<Outcome[]> {
    const results = await this.#batch(cmds);
    return results.map(([err, reply]) => (err ? toOutcome(err) : { ok: true, reply: reply as RawReply }));
  }

  /**
   * MULTI, the commands, EXEC written in one socket write, so no other request's command can land
   * inside the transaction. A command Redis refuses while queueing (unknown command, wrong arity)
   * discards the whole transaction: that is one error for the request, as on Upstash.
   */
  async multiExec(cmds: CommandLine[]): Promise<Outcome[] | { discarded: string }> {
    const multi: CommandLine = { name: "multi", args: [] };
    const exec: CommandLine = { name: "exec", args: [] };
    const results = await this.#batch([multi, ...cmds, exec]);
    const [execErr, execReply] = results[results.length - 1]!;
    if (execErr) {
      const queueError = results.slice(1, -1).find(([err]) => err)?.[0];
      return {
        discarded: queueError ? `${execErr.message.replace(/\.$/, "")}: ${queueError.message}` : execErr.message,
      };
    }
    if (!Array.isArray(execReply)) return { discarded: "EXECABORT transaction was not executed" };
    return (execReply as RawReply[]).map((reply) =>
      reply instanceof Error ? toOutcome(reply) : { ok: true as const, reply },
    );
  }

  async close(): Promise<void> {
    this.#closing = true;
    try {
      await this.#redis.quit();
    } catch {
      this.#redis.disconnect();
    }
  }

  async #batch(cmds: CommandLine[]): Promise<[Error | null, unknown][]> {
    // Checked up front: ioredis flushes a pipeline only once every command was written, so a
    // batch started mid-reconnect could half-write and never settle.
    this.#assertReady();
    const pipeline = this.#redis.pipeline() as unknown as Pipeline; // typed as a commander; sendCommand is public on the class
    for (const cmd of cmds) pipeline.sendCommand(new RawCommand(cmd));
    const results = (await pipeline.exec()) ?? [];
    for (const [err] of results) if (err) toOutcome(err);
    return results;
  }

  #assertReady(): void {
    if (!this.ready) throw new RedisUnavailableError(`redis is unreachable (connection ${this.#redis.status})`);
  }
}

/** A Redis error reply becomes the command's outcome; anything else means Redis is unavailable. */
function toOutcome(err: unknown): Outcome {
  if (err instanceof ReplyError) return { ok: false, error: (err as Error).message };
  const message = err instanceof Error ? err.message : String(err);
  throw new RedisUnavailableError(`redis is unreachable (${message})`, { cause: err });
}
