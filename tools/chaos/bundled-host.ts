/**
 * Chaos hosts are the real `sandbox-host/main.ts`, bundled once per run with esbuild (the one tsx
 * ships) into `.tmp/chaos/host.mjs`. Why: a host under `node --import tsx` costs ~2 s of CPU to
 * start (transforming and loading ~400 modules), ~0.5 s bundled; the harness spawns a
 * replacement for every SIGKILL, and on 2 cores that difference decides whether 60 kills fit in
 * a few minutes. Same source, same process model; only the loader differs.
 * dockerode stays external (native optional deps); the text-only runner never loads it.
 */
import { type ChildProcess, spawn } from "node:child_process";
import { mkdir } from "node:fs/promises";
import { createRequire } from "node:module";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { stopProcessGroup } from "../services/process";
import type { HostHandle } from "../stack";

export async function bundleHost(root: string): Promise<string> {
  const require = createRequire(join(root, "package.json"));
  const esbuild = require(require.resolve("esbuild", { paths: [require.resolve("tsx")] })) as {
    build(o: Record<string, unknown>): Promise<{ errors: unknown[] }>;
  };
  const outfile = join(root, ".tmp", "chaos", "host.mjs");
  await mkdir(join(root, ".tmp", "chaos"), { recursive: true });
  await esbuild.build({
    entryPoints: [join(root, "sandbox-host", "main.ts")],
    bundle: true,
    platform: "node",
    format: "esm",
    target: "node20",
    outfile,
    external: ["dockerode", "pg-native"],
    // CJS dependencies call require(); give the ESM bundle one.
    banner: { js: 'import { createRequire as __cr } from "node:module"; const require = __cr(import.meta.url);' },
    logLevel: "warning",
  });
  return outfile;
}

/** Spawn the bundled host in its own process group and wait for its `host.ready` line. */
export async function spawnBundledHost(
  bundle: string,
  env: Record<string, string>,
  onLine: (line: string) => void,
): Promise<HostHandle> {
  const child: ChildProcess = spawn(process.execPath, [bundle], {
    env: { ...process.env, ...env },
    detached: true,
    stdio: ["ignore", "pipe", "pipe"],
  });
  const tail: string[] = [];
  // Whole lines only: the harness counts what hosts report, and a chunk may end mid-line.
  createInterface({ input: child.stderr as NodeJS.ReadableStream }).on("line", (line) => {
    tail.push(line);
    if (tail.length > 20) tail.shift();
    onLine(line);
  });
  const ready = await new Promise<{ id: string; metrics_url: string }>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`host not ready in 60 s\n${tail.join("\n")}`)), 60_000);
    createInterface({ input: child.stdout as NodeJS.ReadableStream }).on("line", (line) => {
      try {
        const msg = JSON.parse(line) as { event?: string; id?: string; metrics_url?: string };
        if (msg.event === "host.ready" && msg.id && msg.metrics_url) {
          clearTimeout(timer);
          resolve({ id: msg.id, metrics_url: msg.metrics_url });
        }
      } catch {}
    });
    child.once("exit", (code, sig) => {
      clearTimeout(timer);
      reject(new Error(`host exited (${code ?? sig}) before ready\n${tail.join("\n")}`));
    });
  }).catch(async (err) => {
    await stopProcessGroup(child, 1000);
    throw err;
  });
  return { id: ready.id, metricsUrl: ready.metrics_url, process: child, stop: () => stopProcessGroup(child, 5000) };
}
