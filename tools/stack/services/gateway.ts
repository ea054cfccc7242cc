/**
 * Runs the gateway Worker in workerd, offline. Two runners:
 *
 *   miniflare (default)  tools/stack/services/gateway-runner.ts: the deploy bundle in workerd through
 *                        Miniflare, one workerd process, no reload proxy in front.
 *   wrangler             `wrangler dev`: the same Worker behind wrangler's ProxyWorker, a second
 *                        workerd that re-proxies every request and stream (about 3× less
 *                        database-touching throughput here, docs/capacity.md).
 *
 * Choose with GATEWAY_RUNNER=wrangler|miniflare; GATEWAY_INSPECTOR_PORT opens the Worker's
 * DevTools inspector under miniflare (wrangler dev always opens one), GATEWAY_RUNNER_CPU_PROF
 * a CPU profile of the miniflare runner's own Node process. Either way the child runs in its own process
 * group and we stop the whole group (killing wrangler's parent alone leaves workerd running), and every port is chosen free: a busy port is a hard error in both.
 */
import { type ChildProcess, spawn } from "node:child_process";
import { mkdir } from "node:fs/promises";
import { createRequire } from "node:module";
import { createServer } from "node:net";
import { resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { ensureConsoleBuilt } from "../../build/console";
import { freePort, waitFor } from "./ports";
import { killOnExit, stopProcessGroup } from "./process";
import { makeOwnedTempDir, removeOwnedTempDir } from "./temp-dirs";
import { offlineWranglerEnv } from "./wrangler-env";

const require = createRequire(import.meta.url);

export type GatewayRunner = "miniflare" | "wrangler";

export interface GatewayService {
  url: string;
  port: number;
  runner: GatewayRunner;
  process: ChildProcess;
  stop(): Promise<void>;
}

export interface GatewayOptions {
  vars: Record<string, string>;
  port?: number;
  /** Where workerd keeps Durable Object state (SQLite). */
  persistTo: string;
  /**
   * Where Miniflare's R2 keeps the BLOBS bucket (miniflare runner; default `r2` inside persistTo).
   * `wrangler dev` keeps it under its `--persist-to` directory (`v3/r2`), next to the objects.
   */
  r2PersistTo?: string;
  root?: string;
  /** Rebuild and reload the Worker when its source changes (`npm run dev`). */
  watch?: boolean;
  /** Default: GATEWAY_RUNNER, else miniflare. */
  runner?: GatewayRunner;
  log?: (line: string) => void;
}

export function gatewayRunnerFromEnv(value = process.env.GATEWAY_RUNNER): GatewayRunner {
  if (value === undefined || value === "" || value === "miniflare") return "miniflare";
  if (value === "wrangler") return "wrangler";
  throw new Error(`GATEWAY_RUNNER must be "miniflare" or "wrangler" (got "${value}")`);
}

async function wranglerDev(root: string, port: number, opts: GatewayOptions): Promise<ChildProcess> {
  const inspectorPort = await freePort();
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
  return spawn(process.execPath, args, {
    cwd: root,
    env: offlineWranglerEnv(root),
    detached: true,
    stdio: ["ignore", "pipe", "pipe"],
  });
}

function miniflareRunner(root: string, port: number, opts: GatewayOptions, outdir: string): ChildProcess {
  const runner = fileURLToPath(new URL("./gateway-runner.ts", import.meta.url));
  const inspector = process.env.GATEWAY_INSPECTOR_PORT;
  const settings = {
    port,
    host: "127.0.0.1",
    persistTo: opts.persistTo,
    r2PersistTo: opts.r2PersistTo,
    vars: opts.vars,
    watch: opts.watch,
    root,
    inspectorPort: inspector ? Number(inspector) : undefined,
    outdir,
  };
  // GATEWAY_RUNNER_CPU_PROF=DIR profiles this Node process alone (the rest of the stack
  // inherits no flag); the profile is written when the runner stops.
  const prof = process.env.GATEWAY_RUNNER_CPU_PROF;
  const profile = prof ? ["--cpu-prof", "--cpu-prof-dir", resolve(prof)] : [];
  return spawn(process.execPath, [...profile, "--import", "tsx", runner], {
    cwd: root,
    env: { ...offlineWranglerEnv(root), EAR_GATEWAY_RUNNER: JSON.stringify(settings) },
    detached: true,
    stdio: ["ignore", "pipe", "pipe"],
  });
}

/**
 * A chosen port held by another process is said at once, by name; found only by the runner it
 * surfaced as workerd's bind error after the console build and the bundle, and a holder that
 * answers /healthz (another `npm run dev`) would have been taken for our gateway.
 */
async function assertPortFree(port: number): Promise<void> {
  await new Promise<void>((resolveFree, reject) => {
    const probe = createServer();
    probe.once("error", (err: NodeJS.ErrnoException) =>
      reject(
        err.code === "EADDRINUSE"
          ? new Error(`the gateway port ${port} is in use by another process (choose another with GATEWAY_PORT)`)
          : err,
      ),
    );
    probe.listen(port, "127.0.0.1", () => probe.close(() => resolveFree()));
  });
}

export async function startGateway(opts: GatewayOptions): Promise<GatewayService> {
  const root = resolve(opts.root ?? process.cwd());
  const port = opts.port ?? (await freePort());
  if (opts.port !== undefined) await assertPortFree(port);
  const runner = opts.runner ?? gatewayRunnerFromEnv();
  await mkdir(opts.persistTo, { recursive: true });
  // wrangler.toml's [assets] directory must exist before either runner reads the config.
  await ensureConsoleBuilt(root, (line) => opts.log?.(line));
  // The Worker bundle's directory is ours, not the runner's: the runner is stopped by a signal to
  // its whole process group and did not reliably get to delete it (every start left 4.4 MB in
  // the temp folder), so it is removed here once the runner has exited.
  const outdir = runner === "miniflare" ? await makeOwnedTempDir("ear-gateway-bundle-") : null;
  const removeOutdir = () => (outdir ? removeOwnedTempDir(outdir) : Promise.resolve());
  const child =
    runner === "wrangler" ? await wranglerDev(root, port, opts) : miniflareRunner(root, port, opts, outdir as string);
  killOnExit(child, { group: true });
  const tail: string[] = [];
  const onData = (buf: Buffer) => {
    for (const line of buf.toString().split("\n")) {
      if (!line.trim()) continue;
      tail.push(line);
      if (tail.length > 40) tail.shift();
      if (!line.startsWith("ready http")) opts.log?.(line);
    }
  };
  child.stdout?.on("data", onData);
  child.stderr?.on("data", onData);
  const url = `http://127.0.0.1:${port}`;
  try {
    // The probe stops at the runner's exit (waitFor would keep retrying a thrown error until its
    // timeout), and each fetch has its own timeout: a port held by something that accepts and
    // never answers hung the start for good.
    const answered = await waitFor(
      `the gateway (${runner}) to answer /healthz`,
      async () => {
        if (child.exitCode !== null || child.signalCode !== null) return "exited";
        const res = await fetch(`${url}/healthz`, { signal: AbortSignal.timeout(2000) });
        return res.ok && "ok";
      },
      { timeoutMs: 60_000, intervalMs: 100 },
    );
    if (answered === "exited")
      throw new Error(`the ${runner} gateway exited with ${child.exitCode ?? child.signalCode}`);
  } catch (err) {
    await stopProcessGroup(child);
    await removeOutdir();
    throw new Error(`${err instanceof Error ? err.message : String(err)}\n${tail.join("\n")}`);
  }
  return {
    url,
    port,
    runner,
    process: child,
    stop: async () => {
      await stopProcessGroup(child);
      await removeOutdir();
    },
  };
}
