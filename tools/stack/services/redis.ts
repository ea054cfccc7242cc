/**
 * A throwaway redis-server from PATH on a free loopback port, no persistence. Missing binary →
 * a clear message naming the install command.
 */
import { type ChildProcess, spawn } from "node:child_process";
import { createConnection } from "node:net";
import { freePort, waitFor } from "./ports";
import { killOnExit } from "./process";

export interface RedisService {
  url: string;
  port: number;
  process: ChildProcess;
  stop(): Promise<void>;
}

export class MissingBinaryError extends Error {
  constructor(binary: string, install: string) {
    super(`${binary} was not found on PATH. Install it with: ${install} (or set REDIS_URL / UPSTASH_REDIS_REST_URL).`);
    this.name = "MissingBinaryError";
  }
}

export function redisPing(port: number, host = "127.0.0.1"): Promise<boolean> {
  return new Promise((resolve) => {
    const sock = createConnection({ port, host });
    sock.setTimeout(500);
    sock.on("connect", () => sock.write("PING\r\n"));
    sock.on("data", (d) => {
      sock.destroy();
      resolve(d.toString().startsWith("+PONG"));
    });
    sock.on("error", () => resolve(false));
    sock.on("timeout", () => {
      sock.destroy();
      resolve(false);
    });
  });
}

export async function startRedis(opts: { port?: number } = {}): Promise<RedisService> {
  const port = opts.port ?? (await freePort());
  const child = spawn(
    "redis-server",
    ["--port", String(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--protected-mode", "no"],
    // Its own process group: a Ctrl-C in `npm run dev`'s terminal reaches the whole foreground
    // group, and redis-server quit at once while the hosts and the bridge still used it (the
    // bridge printed "redis unreachable" during every stop); the stack stops it last, below.
    { stdio: ["ignore", "ignore", "pipe"], detached: true },
  );
  killOnExit(child);
  const spawnError = new Promise<never>((_, reject) =>
    child.once("error", (err: NodeJS.ErrnoException) =>
      reject(err.code === "ENOENT" ? new MissingBinaryError("redis-server", "sudo apt-get install redis-server") : err),
    ),
  );
  await Promise.race([waitFor(`redis-server on port ${port}`, () => redisPing(port)), spawnError]);
  return {
    url: `redis://127.0.0.1:${port}`,
    port,
    process: child,
    async stop() {
      if (child.exitCode !== null || child.signalCode !== null) return;
      const exited = new Promise((r) => child.once("exit", r));
      child.kill("SIGTERM");
      await Promise.race([exited, new Promise((r) => setTimeout(r, 3000))]);
      if (child.exitCode === null && child.signalCode === null) child.kill("SIGKILL");
    },
  };
}
