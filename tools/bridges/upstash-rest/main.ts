/**
 * Upstash-REST-compatible HTTP bridge over a real Redis, for local development and tests.
 *
 * Runtime code talks to Redis only through @upstash/redis (src/quota/redis.ts), which speaks
 * HTTP, because Workers cannot open TCP sockets to Redis. Upstash is not reachable offline, so
 * locally this bridge answers the same REST protocol (`POST /` command, `/pipeline`,
 * `/multi-exec`, the `/<cmd>/<arg>` path form, `Upstash-Encoding: base64`, bearer token) from a
 * redis-server on loopback. Measured: ~1.2–1.5 ms per command through the bridge vs ~0.2 ms
 * direct ioredis (measured on this machine), so tests see realistic HTTP round trips.
 *
 * Upstash-only Lua shebang flags (`allow-key-locking`, used by @upstash/ratelimit) are dropped
 * before Redis sees a script (upstash-rest/commands.ts, ScriptTranslator).
 *
 * BLPOP/BRPOP with a timeout of at most 60 s are served, each on a connection of its own for the
 * length of its wait (a sleeping host waits on one). Not provided: other blocking forms, pub/sub, MONITOR and connection-state commands (refused with a clear
 * error, see upstash-rest/commands.ts), SSE endpoints, `Upstash-Response-Format: resp2`,
 * read-only tokens, read-your-writes sync tokens (one Redis: every read sees every write).
 *
 * CLI: tsx tools/bridges/upstash-rest/main.ts --redis-url redis://127.0.0.1:6379 --token T [--port N] [--host H] [--workers N]
 *      (or REDIS_URL, UPSTASH_BRIDGE_TOKEN, UPSTASH_BRIDGE_PORT, UPSTASH_BRIDGE_HOST, UPSTASH_BRIDGE_WORKERS;
 *      --workers: tools/bridges/workers.ts)
 */
import { createHash, timingSafeEqual } from "node:crypto";
import { createServer, type IncomingMessage, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { pathToFileURL } from "node:url";
import { parseArgs } from "node:util";
import { parseWorkers, serveWithWorkers } from "../workers";
import {
  BadCommandError,
  type CommandLine,
  commandFromJson,
  commandFromPath,
  commandsFromJson,
  isBoundedBlockingPop,
  refusalReason,
  ScriptTranslator,
} from "./commands";
import { type Outcome, RedisLink, RedisUnavailableError } from "./redis-link";
import { type Encoding, encodeReply } from "./reply";

export interface UpstashBridgeOptions {
  redisUrl: string;
  token: string;
  host?: string;
  /** 0 or absent: a free port chosen by the kernel. */
  port?: number;
  /** Request bodies above this are refused with 400 (default 1 MiB, Upstash's free-tier request limit). */
  maxBodyBytes?: number;
  connectTimeoutMs?: number;
  commandTimeoutMs?: number;
  log?: (line: string) => void;
}

export interface UpstashBridge {
  url: string;
  token: string;
  port: number;
  /** Requests served per endpoint: lets tests see that the client really pipelined. */
  stats(): { command: number; pipeline: number; multiExec: number };
  close(): Promise<void>;
}

/** Upstash's wording, so an auth failure reads the same locally and in production. */
const UNAUTHORIZED = "WRONGPASS invalid or missing auth token";

export async function startUpstashBridge(opts: UpstashBridgeOptions): Promise<UpstashBridge> {
  if (!opts.token) throw new Error("upstash-bridge: a non-empty token is required");
  const log = opts.log ?? ((line: string) => console.error(`[upstash-bridge] ${line}`));
  const maxBodyBytes = opts.maxBodyBytes ?? 1024 * 1024;
  const link = new RedisLink(opts.redisUrl, {
    connectTimeoutMs: opts.connectTimeoutMs,
    commandTimeoutMs: opts.commandTimeoutMs,
    onStatus: log,
  });
  const tokenDigest = digest(opts.token);
  const scripts = new ScriptTranslator((text) => createHash("sha1").update(text, "utf8").digest("hex"));
  const stats = { command: 0, pipeline: 0, multiExec: 0 };

  const handle = async (req: IncomingMessage, res: ServerResponse): Promise<void> => {
    const url = new URL(req.url ?? "/", "http://bridge");
    if (url.pathname === "/healthz" && req.method === "GET") {
      return send(res, link.ready ? 200 : 503, { ok: link.ready, redis: link.ready ? "ready" : "unreachable" });
    }
    if (req.method !== "GET" && req.method !== "POST" && req.method !== "PUT") {
      return send(res, 405, { error: `ERR method ${req.method} not allowed; use GET, POST or PUT` });
    }
    if (!authorized(req, url, tokenDigest)) return send(res, 401, { error: UNAUTHORIZED });
    const body = await readBody(req, maxBodyBytes);
    const encoding: Encoding =
      req.headers["upstash-encoding"]?.toString().toLowerCase() === "base64" ? "base64" : "utf8";

    if (url.pathname === "/pipeline" || url.pathname === "/multi-exec") {
      const cmds = commandsFromJson(parseJson(body)).map((c) => scripts.translate(c));
      cmds.forEach(assertAllowed);
      let outcomes: Outcome[];
      if (url.pathname === "/pipeline") {
        stats.pipeline++;
        outcomes = await link.pipeline(cmds);
      } else {
        stats.multiExec++;
        const executed = await link.multiExec(cmds);
        if (!Array.isArray(executed)) return send(res, 400, { error: executed.discarded });
        outcomes = executed;
      }
      return send(
        res,
        200,
        outcomes.map((o) => (o.ok ? { result: encodeReply(o.reply, encoding) } : { error: o.error })),
      );
    }

    const cmd = scripts.translate(
      url.pathname === "/" ? commandFromJson(parseJson(body)) : commandFromPath(url.pathname, url.searchParams, body),
    );
    assertAllowed(cmd);
    stats.command++;
    const outcome = isBoundedBlockingPop(cmd)
      ? await link.runBlocking(cmd, Number(String(cmd.args[cmd.args.length - 1])))
      : await link.run(cmd);
    if (!outcome.ok) return send(res, 400, { error: outcome.error });
    return send(res, 200, { result: encodeReply(outcome.reply, encoding) });
  };

  const server = createServer((req, res) => {
    handle(req, res).catch((err: unknown) => {
      if (err instanceof BadCommandError) return send(res, 400, { error: err.message });
      if (err instanceof RedisUnavailableError) return send(res, 503, { error: `ERR ${err.message}` });
      log(
        `unexpected error on ${req.method} ${req.url}: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}`,
      );
      send(res, 500, { error: "ERR internal bridge error" });
    });
  });
  // Node closes idle keep-alive sockets after 5 s by default; a client (workerd's fetch, undici)
  // reusing one at that instant sees "Network connection lost". Outlive any client's idle reuse.
  server.keepAliveTimeout = 75_000;
  server.headersTimeout = 76_000;

  await link.waitUntilReady(Math.max(opts.connectTimeoutMs ?? 500, 1_000));
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(opts.port ?? 0, opts.host ?? "127.0.0.1", () => {
      server.off("error", reject);
      resolve();
    });
  });
  const { address, port } = server.address() as AddressInfo;
  const host = address.includes(":") ? `[${address}]` : address;

  return {
    url: `http://${host}:${port}`,
    token: opts.token,
    port,
    stats: () => ({ ...stats }),
    async close() {
      const closed = new Promise<void>((resolve) => server.close(() => resolve()));
      // Keep-alive sockets from fetch would otherwise hold close() open for ~5 s.
      server.closeAllConnections();
      await closed;
      await link.close();
    },
  };
}

function assertAllowed(cmd: CommandLine): void {
  const reason = refusalReason(cmd);
  if (reason) throw new BadCommandError(reason);
}

function digest(s: string): Buffer {
  return createHash("sha256").update(s, "utf8").digest();
}

/** `Authorization: Bearer <token>` or `?_token=`; compared by digest, so in constant time and length. */
function authorized(req: IncomingMessage, url: URL, tokenDigest: Buffer): boolean {
  const header = req.headers.authorization ?? "";
  const match = /^Bearer\s+(.+)$/i.exec(header);
  const given = match?.[1] ?? url.searchParams.get("_token");
  return given != null && timingSafeEqual(digest(given), tokenDigest);
}

function parseJson(body: Buffer): unknown {
  if (body.length === 0) throw new BadCommandError("ERR empty request body; expected a JSON array");
  try {
    return JSON.parse(body.toString("utf8"));
  } catch (err) {
    throw new BadCommandError(`ERR request body is not valid JSON (${(err as Error).message})`);
  }
}

/**
 * Reads the whole body, refusing more than `limit` bytes. An oversized body is drained and
 * discarded (memory stays bounded) before the 400, so the client reads the answer instead of a reset.
 */
function readBody(req: IncomingMessage, limit: number): Promise<Buffer> {
  const tooBig = () => new BadCommandError(`ERR request body exceeds the bridge's limit of ${limit} bytes`);
  if (Number(req.headers["content-length"] ?? 0) > limit) {
    req.resume();
    return new Promise((_, reject) => req.once("end", () => reject(tooBig())).once("error", reject));
  }
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    req.on("data", (chunk: Buffer) => {
      size += chunk.length;
      if (size <= limit) chunks.push(chunk);
      else chunks.length = 0;
    });
    req.once("end", () => (size > limit ? reject(tooBig()) : resolve(Buffer.concat(chunks))));
    req.once("error", reject);
  });
}

function send(res: ServerResponse, status: number, body: unknown): void {
  if (res.headersSent) return;
  const json = JSON.stringify(body);
  res.writeHead(status, { "content-type": "application/json", "content-length": Buffer.byteLength(json) });
  res.end(json);
}

async function main(): Promise<void> {
  const { values } = parseArgs({
    options: {
      "redis-url": { type: "string" },
      token: { type: "string" },
      port: { type: "string" },
      host: { type: "string" },
      workers: { type: "string" },
    },
  });
  const redisUrl = values["redis-url"] ?? process.env.REDIS_URL ?? "redis://127.0.0.1:6379";
  const token = values.token ?? process.env.UPSTASH_BRIDGE_TOKEN;
  const port = Number(values.port ?? process.env.UPSTASH_BRIDGE_PORT ?? 0);
  const host = values.host ?? process.env.UPSTASH_BRIDGE_HOST;
  if (!token) {
    console.error("upstash-bridge: --token (or UPSTASH_BRIDGE_TOKEN) is required");
    process.exit(2);
  }
  if (!Number.isInteger(port) || port < 0 || port > 65535) {
    console.error(`upstash-bridge: invalid port ${JSON.stringify(values.port ?? process.env.UPSTASH_BRIDGE_PORT)}`);
    process.exit(2);
  }
  const workers = parseWorkers(
    values.workers ?? process.env.UPSTASH_BRIDGE_WORKERS,
    "upstash-bridge: --workers / UPSTASH_BRIDGE_WORKERS",
  );
  await serveWithWorkers(
    "upstash-bridge",
    workers,
    () => startUpstashBridge({ redisUrl, token, host, port }),
    (url) => [
      `upstash-bridge listening on ${url} → ${redisUrl}${workers > 1 ? ` (${workers} worker processes)` : ""}`,
      `UPSTASH_REDIS_REST_URL=${url}`,
    ],
  );
}

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) {
  main().catch((err: unknown) => {
    console.error(err);
    process.exit(1);
  });
}
