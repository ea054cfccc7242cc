/**
 * Runs the gateway Worker in workerd through Miniflare, the engine `wrangler dev` drives, but
 * without wrangler dev's reload proxy: `wrangler dev` answers every request in a second workerd
 * process (its ProxyWorker) that re-proxies the request, and every SSE stream, to the Worker's
 * own workerd. Measured on a 2-core machine (docs/capacity.md, "The gateway runner"): that hop
 * halves plain-request throughput and cuts database-touching requests to about a third.
 *
 * The Worker is bundled by wrangler itself (`wrangler deploy --dry-run --outdir`, the same
 * esbuild and nodejs_compat aliases a deploy uses) and its bindings and Durable Objects come from
 * wrangler.toml (`unstable_getMiniflareWorkerOptions`), so nothing about the Worker is described
 * twice. With `watch`, a change under workers/, src/ or console/ (or to wrangler.toml) rebuilds
 * and reloads it in place (the console's static assets too); Durable Object state survives the
 * reload.
 *
 * Started by tools/stack/services/gateway.ts as a child process; its settings come in one environment
 * variable, EAR_GATEWAY_RUNNER (JSON: {port, host, persistTo, r2PersistTo, vars, watch, inspectorPort, outdir}), so secrets do not
 * show up in `ps`. It prints `ready <url>` once the Worker answers.
 */
import { spawn } from "node:child_process";
import { watch } from "node:fs/promises";
import { createRequire } from "node:module";
import { join, resolve } from "node:path";
import { Log, LogLevel, Miniflare, type MiniflareOptions } from "miniflare";
import { unstable_getMiniflareWorkerOptions } from "wrangler";
import { ensureConsoleBuilt } from "../../build/console";
import { offlineWranglerEnv } from "./wrangler-env";

interface RunnerSettings {
  port: number;
  host?: string;
  persistTo: string;
  /** Where Miniflare's own R2 keeps the BLOBS bucket (default: `r2` inside persistTo). */
  r2PersistTo?: string;
  vars: Record<string, string>;
  watch?: boolean;
  root?: string;
  /** Chrome DevTools inspector for the Worker (GATEWAY_INSPECTOR_PORT); none when unset. */
  inspectorPort?: number;
  /** Where the Worker bundle goes; created, owned and removed by tools/stack/services/gateway.ts. */
  outdir: string;
}

const require = createRequire(import.meta.url);

function readSettings(): RunnerSettings {
  const raw = process.env.EAR_GATEWAY_RUNNER;
  if (!raw) throw new Error("EAR_GATEWAY_RUNNER is not set (tools/stack/services/gateway.ts starts this runner)");
  const s = JSON.parse(raw) as RunnerSettings;
  if (
    !Number.isInteger(s.port) ||
    typeof s.persistTo !== "string" ||
    typeof s.vars !== "object" ||
    typeof s.outdir !== "string"
  ) {
    throw new Error("EAR_GATEWAY_RUNNER must hold {port, persistTo, vars, outdir}");
  }
  return s;
}

/**
 * `wrangler deploy --dry-run --outdir`: the deploy bundle, built offline, of wrangler.toml's
 * top-level (local) environment; `--env=` says so, where wrangler would otherwise warn that
 * named environments exist and none was chosen.
 */
async function bundle(root: string, outdir: string): Promise<string> {
  const wrangler = require.resolve("wrangler/bin/wrangler.js", { paths: [root] });
  const child = spawn(process.execPath, [wrangler, "deploy", "--dry-run", "--env=", "--outdir", outdir], {
    cwd: root,
    env: offlineWranglerEnv(root),
    stdio: ["ignore", "pipe", "pipe"],
  });
  const output: string[] = [];
  child.stdout.on("data", (b: Buffer) => output.push(b.toString()));
  child.stderr.on("data", (b: Buffer) => output.push(b.toString()));
  const code = await new Promise<number | null>((r) => child.once("exit", (c) => r(c)));
  if (code !== 0) throw new Error(`bundling the gateway failed (wrangler exit ${code}):\n${output.join("")}`);
  return join(outdir, "index.js");
}

function miniflareOptions(root: string, s: RunnerSettings, scriptPath: string, outdir: string): MiniflareOptions {
  const { workerOptions } = unstable_getMiniflareWorkerOptions(join(root, "wrangler.toml"));
  return {
    ...workerOptions,
    host: s.host ?? "127.0.0.1",
    port: s.port,
    // The bundle is one ES module (wrangler inlines everything; `node:` and `cloudflare:` imports
    // are workerd's own), so it is named here rather than found: with `modules: true` Miniflare
    // parses the whole 2 MB bundle with acorn to look for imports, the largest single cost in a
    // CPU profile of this process (~1.9 s of ~14 s sampled over a step-100 load run), again on
    // every reload, and its syntax tree is garbage for a later major GC.
    modules: [{ type: "ESModule", path: scriptPath }],
    modulesRoot: outdir,
    bindings: { ...workerOptions.bindings, ...s.vars },
    durableObjectsPersist: s.persistTo,
    // The BLOBS bucket (wrangler.toml r2_buckets) is Miniflare's own R2, on disk like the objects.
    r2Persist: s.r2PersistTo ?? join(s.persistTo, "r2"),
    ...(s.inspectorPort ? { inspectorPort: s.inspectorPort } : {}),
    // `GET /cdn-cgi/handler/scheduled?cron=…` runs the Worker's scheduled handler and answers 200
    // or 500 once it has finished; `wrangler dev` always exposes it. Miniflare 4 has no cron timer
    // of its own, so nothing fires wrangler.toml's triggers here unless asked (docs/deploy.md).
    unsafeTriggerHandlers: true,
    // With [assets] in wrangler.toml, Miniflare (4.20260426) hands every request without a
    // matching route to the assets' RPC proxy Worker, which has no scheduled handler: the
    // trigger route answered 500 "exception" without running ours. A route for the trigger path
    // alone sends it to the Worker itself; every other path still goes through the assets.
    routes: [...(workerOptions.routes ?? []), "*/cdn-cgi/handler/scheduled*"],
    log: new Log(LogLevel.WARN),
  } as MiniflareOptions;
}

async function main(): Promise<void> {
  const s = readSettings();
  const root = resolve(s.root ?? process.cwd());
  const outdir = s.outdir;
  let mf: Miniflare | null = null;
  const stop = async (code: number) => {
    try {
      await mf?.dispose();
    } finally {
      process.exit(code);
    }
  };
  process.once("SIGTERM", () => void stop(0));
  process.once("SIGINT", () => void stop(0));

  const scriptPath = await bundle(root, outdir);
  mf = new Miniflare(miniflareOptions(root, s, scriptPath, outdir));
  const url = await mf.ready;
  console.log(`ready ${url.origin}`);

  if (s.watch)
    void reloadOnChange(root, async () => {
      const started = Date.now();
      await ensureConsoleBuilt(root, (line) => console.log(line));
      await bundle(root, outdir);
      await mf?.setOptions(miniflareOptions(root, s, scriptPath, outdir));
      console.log(`reloaded the gateway in ${Date.now() - started} ms`);
    });
}

/** Rebuild after a quiet 150 ms following any change; one rebuild at a time. */
async function reloadOnChange(root: string, reload: () => Promise<void>): Promise<void> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  let running: Promise<void> = Promise.resolve();
  const schedule = () => {
    clearTimeout(timer);
    timer = setTimeout(() => {
      running = running.then(reload).catch((err) => console.error(`gateway not reloaded: ${(err as Error).message}`));
    }, 150);
  };
  const watchOne = async (path: string, recursive: boolean) => {
    for await (const _ of watch(path, { recursive })) schedule();
  };
  await Promise.all([
    watchOne(join(root, "workers"), true),
    watchOne(join(root, "src"), true),
    watchOne(join(root, "wrangler.toml"), false),
    watchOne(join(root, "console"), true),
  ]);
}

main().catch((err) => {
  console.error(`gateway runner failed: ${err instanceof Error ? err.message : String(err)}`);
  process.exit(1);
});
