/**
 * Turns Upstash REST requests into Redis command lines and refuses the commands a shared
 * connection cannot serve. Pure: no I/O, so every rule here is testable without a server.
 */

export type CommandArg = string | Buffer;

export interface CommandLine {
  /** Lower-case command name, as ioredis keys its flags and as our refusal list is written. */
  name: string;
  args: CommandArg[];
}

/** A request the bridge refuses before Redis sees it: HTTP 400 with `message`. */
export class BadCommandError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "BadCommandError";
  }
}

/**
 * Every HTTP request shares one Redis connection, so a command that blocks it (BLPOP 0 would
 * stall every other caller) or changes its state (SELECT, SUBSCRIBE, MULTI, CLIENT REPLY OFF
 * would corrupt the reply order of everything after it) is refused instead of being served on
 * a dedicated connection: nothing in this runtime needs them over REST, and Upstash itself
 * serves pub/sub and MONITOR on separate SSE endpoints, not as commands.
 */
const REFUSED: ReadonlyMap<string, string> = new Map([
  ...["brpoplpush", "blmove", "blmpop", "bzpopmin", "bzpopmax", "bzmpop", "wait", "waitaof"].map(
    (c) => [c, "blocks the bridge's shared Redis connection"] as const,
  ),
  ...["subscribe", "psubscribe", "ssubscribe", "unsubscribe", "punsubscribe", "sunsubscribe", "monitor"].map(
    (c) => [c, "needs a dedicated streaming connection, which the bridge does not provide"] as const,
  ),
  ...["multi", "exec", "discard", "watch", "unwatch"].map(
    (c) => [c, "is connection state; send the transaction to /multi-exec instead"] as const,
  ),
  ...["select", "swapdb", "auth", "hello", "reset", "quit", "sync", "psync", "replconf"].map(
    (c) => [c, "would change the state of the bridge's shared Redis connection"] as const,
  ),
]);

/** The longest BLPOP/BRPOP wait the bridge serves (its HTTP server keeps a request this long). */
export const MAX_BLOCKING_S = 60;

/**
 * BLPOP/BRPOP with a timeout in (0, MAX_BLOCKING_S]: served on a connection of its own for the
 * length of the wait (RedisLink.runBlocking), as Upstash serves them over REST. Hosts sleep on
 * one (sandbox-host/lifecycle/wake-channel.ts). Any other blocking form stays refused.
 */
export function isBoundedBlockingPop(cmd: CommandLine): boolean {
  if (cmd.name !== "blpop" && cmd.name !== "brpop") return false;
  const timeout = Number(argText(cmd.args[cmd.args.length - 1]));
  return cmd.args.length >= 2 && timeout > 0 && timeout <= MAX_BLOCKING_S;
}

/** Why `cmd` cannot run through the bridge, or undefined when it can. */
export function refusalReason(cmd: CommandLine): string | undefined {
  if (cmd.name === "blpop" || cmd.name === "brpop") {
    return isBoundedBlockingPop(cmd)
      ? undefined
      : `ERR command '${cmd.name.toUpperCase()}' needs a timeout in (0, ${MAX_BLOCKING_S}] seconds through the bridge`;
  }
  const reason = REFUSED.get(cmd.name);
  if (reason) return `ERR command '${cmd.name.toUpperCase()}' ${reason}`;
  const sub = argText(cmd.args[0])?.toLowerCase();
  if (cmd.name === "client" && (sub === "reply" || sub === "tracking")) {
    return `ERR command 'CLIENT ${sub.toUpperCase()}' would change the state of the bridge's shared Redis connection`;
  }
  if (
    (cmd.name === "xread" || cmd.name === "xreadgroup") &&
    cmd.args.some((a) => argText(a)?.toLowerCase() === "block")
  ) {
    return `ERR command '${cmd.name.toUpperCase()}' with BLOCK blocks the bridge's shared Redis connection`;
  }
  return undefined;
}

function argText(arg: CommandArg | undefined): string | undefined {
  return typeof arg === "string" ? arg : arg?.toString("utf8");
}

/**
 * One command from a JSON body: `["SET", "k", "v", "EX", 100]`. Numbers and booleans are sent as
 * their text (the client serializes numbers as JSON numbers); anything else is a client bug.
 */
export function commandFromJson(value: unknown, where = "request body"): CommandLine {
  if (!Array.isArray(value) || value.length === 0) {
    throw new BadCommandError(`ERR ${where} must be a non-empty JSON array like ["SET","key","value"]`);
  }
  const parts = value.map((part, i) => {
    if (typeof part === "string") return part;
    if (typeof part === "number" || typeof part === "boolean") return String(part);
    throw new BadCommandError(
      `ERR ${where}: argument ${i} is ${part === null ? "null" : typeof part}; expected a string or number`,
    );
  });
  const [name, ...args] = parts as [string, ...string[]];
  if (name === "") throw new BadCommandError(`ERR ${where}: empty command name`);
  return { name: name.toLowerCase(), args };
}

/** A `/pipeline` or `/multi-exec` body: a non-empty array of commands. */
export function commandsFromJson(value: unknown): CommandLine[] {
  if (!Array.isArray(value) || value.length === 0) {
    throw new BadCommandError('ERR request body must be a non-empty JSON array of commands like [["SET","k","v"]]');
  }
  return value.map((cmd, i) => commandFromJson(cmd, `command ${i}`));
}

/**
 * The path form: `/set/foo/bar?EX=100` with an optional POST body appended (raw bytes, so a
 * binary value survives) before the query parameters, as Upstash documents it.
 */
export function commandFromPath(pathname: string, query: URLSearchParams, body: Buffer | undefined): CommandLine {
  let segments: string[];
  try {
    segments = pathname
      .split("/")
      .filter((s) => s !== "")
      .map(decodeURIComponent);
  } catch {
    throw new BadCommandError(`ERR malformed percent-encoding in path ${JSON.stringify(pathname)}`);
  }
  const [name, ...rest] = segments;
  if (!name) throw new BadCommandError("ERR no command: POST a JSON array to / or use /<command>/<arg>/...");
  const args: CommandArg[] = rest;
  if (body && body.length > 0) args.push(body);
  for (const [key, value] of query) {
    if (key === "_token") continue;
    args.push(key);
    if (value !== "") args.push(value);
  }
  return { name: name.toLowerCase(), args };
}

/**
 * Upstash's server accepts a Lua shebang flag Redis does not: `#!lua flags=allow-key-locking`
 * (every script of @upstash/ratelimit starts with it; Redis 7 answers "ERR Unexpected flag in
 * script shebang"). The bridge drops the flag before Redis sees the script. A client calls
 * EVALSHA with the digest of the script it knows, the flagged text, which Redis has never seen
 * under that digest: so the digest of each rewritten script is remembered and EVALSHA translated.
 * A digest not seen yet goes through as is; Redis answers NOSCRIPT and the client falls back to
 * EVAL, which teaches the bridge the pair.
 */
const UPSTASH_ONLY_FLAGS = new Set(["allow-key-locking"]);
const SHEBANG_RE = /^#!lua([^\n]*)/;

export class ScriptTranslator {
  private readonly digests = new Map<string, string>();

  constructor(private readonly sha1: (text: string) => string) {}

  translate(cmd: CommandLine): CommandLine {
    if (cmd.name === "eval" || cmd.name === "eval_ro") return this.withScript(cmd, 0);
    if (cmd.name === "script" && argText(cmd.args[0])?.toLowerCase() === "load") return this.withScript(cmd, 1);
    if (cmd.name === "evalsha" || cmd.name === "evalsha_ro") {
      const known = this.digests.get(argText(cmd.args[0])?.toLowerCase() ?? "");
      if (known) return { name: cmd.name, args: [known, ...cmd.args.slice(1)] };
    }
    return cmd;
  }

  private withScript(cmd: CommandLine, at: number): CommandLine {
    const script = argText(cmd.args[at]);
    const match = script === undefined ? null : SHEBANG_RE.exec(script);
    if (script === undefined || !match) return cmd;
    const kept = (match[1] ?? "").replace(/flags=([^\s]*)/, (_all, list: string) => {
      const flags = list.split(",").filter((f) => f !== "" && !UPSTASH_ONLY_FLAGS.has(f));
      return flags.length > 0 ? `flags=${flags.join(",")}` : "";
    });
    const rewritten = `#!lua${kept.trimEnd()}${script.slice(match[0].length)}`;
    if (rewritten === script) return cmd;
    this.digests.set(this.sha1(script), this.sha1(rewritten));
    const args = [...cmd.args];
    args[at] = rewritten;
    return { name: cmd.name, args };
  }
}
