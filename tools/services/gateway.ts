/**
 * Runs the gateway under `wrangler dev` (workerd), offline. Per LOCAL-STACK.md: without these env
 * flags wrangler phones home; killing the npx parent leaves workerd running, so wrangler runs in
 * its own process group and we stop the whole group; a busy port is a hard error, so every port
 * (http and inspector) is chosen free.
 */
import { type ChildProcess, spawn } from "node:child_process";
import { mkdir } from "node:fs/promises";
import { createRequire } from "node:module";
import { join, resolve } from "node:path";
import { freePort, waitFor } from "./ports";
import { killOnExit, stopProcessGroup } from "./process";

const require = createRequire(import.meta.url);

export interface GatewayService {
  url: string;
  port: number;
  process: ChildProcess;
  stop(): Promise<void>;
}

export interface GatewayOptions {
  vars: Record<string, string>;
  port?: number;
  /** Where workerd keeps Durable Object state (SQLite). */
  persistTo: string;
  root?: string;
  log?: (line: string) => void;
}

export function offlineWranglerEnv(root: string): NodeJS.ProcessEnv {
  return {
    ...process.env,
    WRANGLER_SEND_METRICS: "false",
    CLOUDFLARE_CF_FETCH_ENABLED: "false",
    WRANGLER_HIDE_BANNER: "true",
    WRANGLER_SEND_ERROR_REPORTS: "false",
    XDG_CONFIG_HOME: join(root, ".wrangler", "config"),
    WRANGLER_LOG_PATH: join(root, ".wrangler", "logs"),
  };
}

export async function startGateway(opts: GatewayOptions): Promise<GatewayService> {
  const root = resolve(opts.root ?? process.cwd());
  const port = opts.port ?? (await freePort());
  const inspectorPort = await freePort();
  await mkdir(opts.persistTo, { recursive: true });
  const wrangler = require.resolve("wrangler/bin/wrangler.js", { paths: [root] });
  const args = [
    wrangler,
    "dev",
    "--ip",
    "127.0.0.1",
    "--port",
    String(port),
    "--inspector-port",
    String(inspectorPort),
    "--persist-to",
    opts.persistTo,
    "--log-level",
    process.env.EAR_WRANGLER_LOG_LEVEL ?? "warn",
    "--show-interactive-dev-session=false",
  ];
  for (const [k, v] of Object.entries(opts.vars)) args.push("--var", `${k}:${v}`);
  const child = spawn(process.execPath, args, {
    cwd: root,
    env: offlineWranglerEnv(root),
    detached: true,
    stdio: ["ignore", "pipe", "pipe"],
  });
  killOnExit(child, { group: true });
  const tail: string[] = [];
  const onData = (buf: Buffer) => {
    for (const line of buf.toString().split("\n")) {
      if (!line.trim()) continue;
      tail.push(line);
      if (tail.length > 40) tail.shift();
      opts.log?.(line);
    }
  };
  child.stdout?.on("data", onData);
  child.stderr?.on("data", onData);
  const url = `http://127.0.0.1:${port}`;
  try {
    await waitFor(
      "the gateway (wrangler dev) to answer /healthz",
      async () => {
        if (child.exitCode !== null) throw new Error(`wrangler exited with ${child.exitCode}:\n${tail.join("\n")}`);
        const res = await fetch(`${url}/healthz`);
        return res.ok;
      },
      { timeoutMs: 60_000, intervalMs: 100 },
    );
  } catch (err) {
    await stopProcessGroup(child);
    throw new Error(`${err instanceof Error ? err.message : String(err)}\n${tail.join("\n")}`);
  }
  return { url, port, process: child, stop: () => stopProcessGroup(child) };
}
